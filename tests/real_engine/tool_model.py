"""A stand-in for the provider's Messages API that behaves like a model calling tools, for the
MCP tool-loop tests.

The last user turn decides the answer:
  - text "call <tool> <json input>"   -> a tool_use of <tool> with that input;
  - text "call twice"                 -> two tool_use blocks in one turn (add, then echo);
  - text "call mine"                  -> a tool_use of the client's own tool `mine`;
  - text "loop"                       -> a tool_use of echo, and again after every result;
  - text "fail upstream"              -> 529 with Anthropic's overloaded error body;
  - tool_result blocks (not "loop")   -> text "results: <each result's text, joined by |>".
A request with "stream": true gets the answer as Anthropic's event stream: every text and
tool input in two deltas, a ping between blocks. Every request body is kept; GET /requests
returns them.

    python tool_model.py --port 8124
Prints LISTENING once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN: list[dict] = []
LOCK = threading.Lock()


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def answer(body: dict) -> tuple[int, dict]:
    messages = body.get("messages", [])
    first = text_of(messages[0]["content"]) if messages else ""
    last = messages[-1]["content"] if messages else ""
    rounds = sum(1 for m in messages if m["role"] == "assistant")
    usage = {"input_tokens": 10 + rounds, "output_tokens": 3}
    def message(content, stop="end_turn"):
        return {"id": f"msg_stand_in_{rounds}", "type": "message", "role": "assistant",
                "model": body.get("model"), "content": content, "stop_reason": stop,
                "stop_sequence": None, "usage": usage}
    def use(name, arguments, n=0):
        return {"type": "tool_use", "id": f"toolu_r{rounds}n{n}", "name": name, "input": arguments}
    if first == "fail upstream":
        return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    if first == "loop":
        return 200, message([use("echo", {"text": f"round {rounds}"})], "tool_use")
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        results = [text_of(b.get("content", [])) for b in last if b.get("type") == "tool_result"]
        return 200, message([{"type": "text", "text": "results: " + "|".join(results)}])
    if first == "call twice":
        return 200, message([{"type": "text", "text": "Two calls."},
                             use("add", {"a": 2, "b": 3}, 0),
                             use("echo", {"text": "hi"}, 1)], "tool_use")
    if first == "call mine":
        return 200, message([use("mine", {"x": 1})], "tool_use")
    if first.startswith("call "):
        _, tool, arguments = first.split(" ", 2)
        return 200, message([use(tool, json.loads(arguments))], "tool_use")
    return 200, message([{"type": "text", "text": "no tools needed"}])


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, message: dict) -> None:
        def send(name: str, data: dict) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def halves(text: str) -> list[str]:
            cut = len(text) // 2
            return [text[:cut], text[cut:]]

        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        start = dict(message, content=[], stop_reason=None,
                     usage={"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1})
        send("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                send("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": {"type": "text", "text": ""}})
                deltas = [{"type": "text_delta", "text": part} for part in halves(block["text"])]
            else:
                send("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": dict(block, input={})})
                deltas = [{"type": "input_json_delta", "partial_json": part}
                          for part in halves(json.dumps(block["input"]))]
            send("ping", {"type": "ping"})
            for delta in deltas:
                send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            send("content_block_stop", {"type": "content_block_stop", "index": index})
        send("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                               "usage": {"output_tokens": message["usage"]["output_tokens"]}})
        send("message_stop", {"type": "message_stop"})

    def do_GET(self):
        with LOCK:
            self.reply(200, list(SEEN))

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length))
        with LOCK:
            SEEN.append({"path": self.path, "body": body,
                         "headers": {k.lower(): v for k, v in self.headers.items()}})
        status, payload = answer(body)
        if status == 200 and body.get("stream"):
            self.stream(payload)
        else:
            self.reply(status, payload)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("LISTENING", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
