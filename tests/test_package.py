import importlib


def test_codec_is_importable_as_ina_compression():
    module = importlib.import_module("ina.compression")
    assert module.__name__ == "ina.compression"
