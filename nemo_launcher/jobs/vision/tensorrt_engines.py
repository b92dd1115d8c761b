"""TensorRT engines from the exported ONNX graphs, where TensorRT can build them (the `tensorrt` package imports
and a GPU is visible); elsewhere the reason why not, which the export job reports as it is.

    reason = unavailable()            # None where engines can be built
    build_engine("/out/onnx/vit.onnx", "/out/plan/vit.plan", {"images": ((1, 3, 224, 224), (64, ...), (64, ...))},
                 fp16=True)

Each input gets one optimisation profile from batch 1 to max_batch_size (optimised for the largest), so an engine
accepts any batch in that range.
"""

from collections.abc import Sequence

Shape = Sequence[int]


def unavailable() -> str | None:
    try:
        import tensorrt  # noqa: F401
    except ImportError as error:
        return f"TensorRT is not installed here (import tensorrt: {error}); no engine was built"
    import torch

    if not torch.cuda.is_available():
        return "TensorRT builds engines on a GPU and none is visible here; no engine was built"
    return None


def build_engine(onnx_path: str, plan_path: str, profiles: dict[str, tuple[Shape, Shape, Shape]], fp16: bool) -> None:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)  # TensorRT 8 asks for it
    network = builder.create_network(0 if explicit is None else 1 << int(explicit))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(onnx_path):
        problems = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT cannot parse {onnx_path}: {problems}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for name, (smallest, optimal, largest) in profiles.items():
        profile.set_shape(name, tuple(smallest), tuple(optimal), tuple(largest))
    config.add_optimization_profile(profile)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise RuntimeError(f"TensorRT could not build an engine from {onnx_path} (its log above says why)")
    with open(plan_path, "wb") as handle:
        handle.write(engine)
