from .bias_gelu import bias_gelu, bias_gelu_reference, extension_loaded

__all__ = ["bias_gelu", "bias_gelu_reference", "extension_loaded"]
