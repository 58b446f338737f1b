"""w8a8 as a transformers quantization method, ``"w8a8"``, registered with transformers' own hooks.

    model = AutoModelForCausalLM.from_pretrained(float_folder, quantization_config=w8a8.W8A8Config(),
                                                 device_map="cpu", dtype=torch.bfloat16)

transformers loads the float model its own way (``device_map``, ``dtype``, ``low_cpu_mem_usage``,
its weight conversions), then this quantizer runs ``w8a8.quantize_model(model, config)`` on it, where
each layer lies: the same model as ``w8a8.quantize_model`` on the model transformers loads without
``quantization_config``. The report is ``model.w8a8_report``; ``model.config.quantization_config``
is the compressed-tensors entry the checkpoint will hold, and ``save_pretrained`` writes that
checkpoint (``w8a8.save_quantized``), which transformers with compressed-tensors, vLLM and
``w8a8.from_pretrained`` read.

Registration is lazy: importing w8a8 imports no transformers. transformers' ``from_pretrained``
asks the config it is given for its ``quant_method`` before it looks the method up;
``W8A8Config.quant_method`` calls ``register()`` (this module, which imports transformers) and
answers ``"w8a8"``. So the first ``from_pretrained(..., quantization_config=W8A8Config())``
registers the method; ``register()`` may also be called directly, e.g. before handing transformers
a dict ``{"quant_method": "w8a8", ...}``.
"""
from __future__ import annotations

from transformers.quantizers import HfQuantizer
from transformers.quantizers.auto import (AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING,
                                          register_quantization_config, register_quantizer)
from transformers.utils.quantization_config import QuantizationConfigMixin

from w8a8.config import W8A8Config

METHOD = "w8a8"


class W8A8QuantizationConfig(QuantizationConfigMixin):
    """A ``W8A8Config`` as a transformers quantization config (what a dict ``{"quant_method": "w8a8",
    ...}`` becomes): ``config`` is the W8A8Config, built from the JSON fields."""

    def __init__(self, config: W8A8Config | None = None, **fields) -> None:
        fields.pop("quant_method", None)
        self.quant_method = METHOD
        self.config = config if config is not None else W8A8Config(**fields)

    def to_dict(self) -> dict:
        return self.config.to_dict()


class W8A8HfQuantizer(HfQuantizer):
    """Quantizes a float model after transformers loaded it (``w8a8.quantize_model``); never a pre-quantized
    folder: w8a8 writes compressed-tensors checkpoints (``quant_method: compressed-tensors``)."""

    requires_calibration = False

    def __init__(self, quantization_config, **kwargs) -> None:
        super().__init__(quantization_config, **kwargs)
        config = getattr(quantization_config, "config", quantization_config)
        if not isinstance(config, W8A8Config):
            raise TypeError(f"w8a8 quantizer: expected a w8a8.W8A8Config, got {type(quantization_config).__name__}")
        self.w8a8_config = config

    def validate_environment(self, *args, **kwargs) -> None:
        if self.pre_quantized:
            raise ValueError(
                "w8a8 quantizer: this folder's config.json says quant_method 'w8a8', which no w8a8 checkpoint holds "
                "(w8a8 writes compressed-tensors); load an int8 folder with w8a8.from_pretrained(path), a float "
                "folder with quantization_config=w8a8.W8A8Config()"
            )

    def _process_model_after_weight_loading(self, model, **kwargs):
        from w8a8.checkpoint.save import checkpoint_config
        from w8a8.quantize_model import quantize_model

        model.w8a8_report = quantize_model(model, self.w8a8_config, progress=False)
        if model.w8a8_report.replaced:
            model.config.quantization_config = checkpoint_config(model)
        return model

    def is_serializable(self, *args, **kwargs) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False


def register() -> None:
    """Register the ``"w8a8"`` method with transformers (once; later calls do nothing). A ``"w8a8"``
    method that another package registered is an error naming it."""
    theirs = AUTO_QUANTIZER_MAPPING.get(METHOD)
    if theirs is W8A8HfQuantizer:
        return
    if theirs is not None:
        raise RuntimeError(f"w8a8: transformers already has a quantization method 'w8a8' ({theirs.__module__}."
                           f"{theirs.__qualname__}); W8A8Config cannot register its own")
    if METHOD not in AUTO_QUANTIZATION_CONFIG_MAPPING:
        register_quantization_config(METHOD)(W8A8QuantizationConfig)
    register_quantizer(METHOD)(W8A8HfQuantizer)
