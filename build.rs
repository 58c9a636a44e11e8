//! Compiles `proto/` into tonic clients and servers with protox, a protobuf compiler in
//! Rust, so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let common = ["proto/common.proto"];
    let engines = [
        "proto/sglang_scheduler.proto",
        "proto/vllm_engine.proto",
        "proto/trtllm_service.proto",
        "proto/tokenspeed_scheduler.proto",
        "proto/mlx_engine.proto",
    ];
    for proto in common.iter().chain(&engines) {
        println!("cargo:rerun-if-changed={proto}");
    }
    // The engines' shared messages first, on their own: the services then refer to them
    // as `grpc::common`, not through a nested `smg::grpc::common` path.
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(protox::compile(common, ["proto"])?)?;
    tonic_prost_build::configure()
        .build_transport(false)
        .extern_path(".smg.grpc.common", "crate::engine::grpc::common")
        .compile_fds(protox::compile(engines, ["proto"])?)?;
    Ok(())
}
