//! Compiles `proto/` into tonic clients and servers with protox, a protobuf compiler in
//! Rust, so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/sglang_scheduler.proto", "proto/vllm_engine.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
