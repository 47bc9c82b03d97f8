"""The benchmarks `python -m fa4mlir bench` runs (MLIR-free; torch and triton imported when they
run, on the GPU machine): attention_bench (fa4mlir vs cuDNN, FA2 and FA4 CuTe on the FA3 grid),
gemm_bench (the bundle's GEMMs vs torch.matmul), decode_bench and prefill_bench (with
prefill_workloads, its torch side: the serving anchors' decode and prefill workloads), timers (the
heated timer they share) and plot_attention (the TFLOP/s plot). Developer probes that build on them live in the checkout's
bench/ folder."""
