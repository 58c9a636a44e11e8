"""A stand-in provider that behaves like a model calling tools, for the MCP tool-loop tests:
Anthropic's Messages API at POST /v1/messages (test_8_mcp_loop.py) and OpenAI's Responses API
at POST /v1/responses with GET /v1/models (test_11_provider_responses.py).

Messages: the first user turn decides the answer:
  - text "call <tool> <json input>"   -> a tool_use of <tool> with that input;
  - text "call twice"                 -> two tool_use blocks in one turn (add, then echo);
  - text "call mine"                  -> a tool_use of the client's own tool `mine`;
  - text "loop"                       -> a tool_use of echo, and again after every result;
  - text "loop slow"                  -> a tool_use of slow (10 s), and again after every result;
  - text "fail upstream"              -> 529 with Anthropic's overloaded error body;
  - tool_result blocks (not "loop")   -> text "results: <each result's text, joined by |>".
A request with "stream": true gets the answer as Anthropic's event stream: every text and
tool input in two deltas, a ping between blocks.

Responses: the same rules read from the input items (the first user message decides;
trailing function_call_output items answer "results: ..."), plus
  - text "say long"                   -> status "incomplete" (max_output_tokens), text "partial";
  - text "fail upstream"              -> 500 with OpenAI's error envelope.
Usage is input 10 + the number of function_call_output items, output 3. A request with
"stream": true gets OpenAI's Responses event stream (sequence numbers from 0, texts and
arguments in two deltas each).

Every POST (path, body, lowercased headers) is kept; GET /requests returns them.

    python tool_model.py --port 8124
Prints LISTENING once it accepts connections.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
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
    if first == "loop slow":
        return 200, message([use("slow", {"seconds": 10})], "tool_use")
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


MODELS = {"object": "list",
          "data": [{"id": "tool-model", "object": "model", "created": 0, "owned_by": "stand-in"}]}
COUNTER = itertools.count(1)


def item_text(content) -> str:
    """The text of a Responses message's content: a string, or input_text/output_text parts."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or []
                   if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text"))


def input_items(body: dict) -> list[dict]:
    given = body.get("input", [])
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    # An item without a type is a message (the SDK's EasyInputMessage).
    return [dict(i, type=i.get("type", "message")) for i in given]


def answer_responses(body: dict) -> tuple[int, dict]:
    """(status, response object or error envelope) for one POST /v1/responses."""
    items = input_items(body)
    users = [i for i in items if i["type"] == "message" and i.get("role") == "user"]
    first = item_text(users[0].get("content")) if users else ""
    rounds = sum(1 for i in items if i["type"] == "function_call_output")
    trailing = []
    for i in reversed(items):
        if i["type"] != "function_call_output":
            break
        trailing.insert(0, i.get("output"))
    n = next(COUNTER)
    usage = {"input_tokens": 10 + rounds, "output_tokens": 3, "total_tokens": 13 + rounds,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}

    def response(output, status="completed", incomplete=None):
        return {"id": f"resp_stand_in_{n}", "object": "response", "created_at": int(time.time()),
                "status": status, "model": body.get("model"), "output": output, "usage": usage,
                "error": None, "incomplete_details": incomplete}

    def message(text):
        return {"type": "message", "id": f"msg_stand_in_{n}", "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def call(name, arguments, k=0):
        return {"type": "function_call", "id": f"fc_stand_in_{n}_{k}", "call_id": f"call_r{rounds}n{k}",
                "name": name, "arguments": json.dumps(arguments), "status": "completed"}

    def output_text(o) -> str:
        return o if isinstance(o, str) else item_text(o)

    if first == "fail upstream":
        return 500, {"error": {"message": "The server is overloaded", "type": "server_error",
                               "param": None, "code": "overloaded"}}
    if first == "loop":
        return 200, response([call("echo", {"text": f"round {rounds}"})])
    if first == "loop slow":
        return 200, response([call("slow", {"seconds": 10})])
    if trailing:
        return 200, response([message("results: " + "|".join(output_text(o) for o in trailing))])
    if first == "call twice":
        return 200, response([message("Two calls."), call("add", {"a": 2, "b": 3}, 0),
                              call("echo", {"text": "hi"}, 1)])
    if first == "call mine":
        return 200, response([call("mine", {"x": 1})])
    if first.startswith("call "):
        _, tool, arguments = first.split(" ", 2)
        return 200, response([call(tool, json.loads(arguments))])
    if first == "say long":
        return 200, response([message("partial")], "incomplete", {"reason": "max_output_tokens"})
    return 200, response([message("no tools needed")])


def halves(text: str) -> list[str]:
    cut = len(text) // 2
    return [text[:cut], text[cut:]]


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

    def stream_response(self, response: dict) -> None:
        """OpenAI's Responses event stream for a finished `response`."""
        numbers = itertools.count()

        def send(data: dict) -> None:
            data = dict(data, sequence_number=next(numbers))
            self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        running = dict(response, status="in_progress", output=[], usage=None, incomplete_details=None)
        send({"type": "response.created", "response": running})
        send({"type": "response.in_progress", "response": running})
        for index, item in enumerate(response["output"]):
            where = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                send({"type": "response.output_item.added", "output_index": index,
                      "item": dict(item, status="in_progress", content=[])})
                for c, part in enumerate(item["content"]):
                    at = dict(where, content_index=c)
                    send(dict(at, type="response.content_part.added",
                              part=dict(part, text="", annotations=[])))
                    for piece in halves(part["text"]):
                        send(dict(at, type="response.output_text.delta", delta=piece, logprobs=[]))
                    send(dict(at, type="response.output_text.done", text=part["text"], logprobs=[]))
                    send(dict(at, type="response.content_part.done", part=part))
            else:
                send({"type": "response.output_item.added", "output_index": index,
                      "item": dict(item, status="in_progress", arguments="")})
                for piece in halves(item["arguments"]):
                    send(dict(where, type="response.function_call_arguments.delta", delta=piece))
                send(dict(where, type="response.function_call_arguments.done",
                          name=item["name"], arguments=item["arguments"]))
            send({"type": "response.output_item.done", "output_index": index, "item": item})
        final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        send({"type": final, "response": response})

    def do_GET(self):
        if self.path == "/requests":
            with LOCK:
                self.reply(200, list(SEEN))
        elif self.path == "/v1/models":
            self.reply(200, MODELS)
        else:
            self.reply(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error",
                                       "param": None, "code": None}})

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length))
        with LOCK:
            SEEN.append({"path": self.path, "body": body,
                         "headers": {k.lower(): v for k, v in self.headers.items()}})
        if self.path.split("?")[0] == "/v1/responses":
            status, payload = answer_responses(body)
            if status == 200 and body.get("stream"):
                self.stream_response(payload)
            else:
                self.reply(status, payload)
            return
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
