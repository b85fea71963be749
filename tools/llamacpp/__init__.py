"""A real llama.cpp ``llama-server`` on CPU, built from source and fed a tiny random-weight model.

Why: the tool must be tested against a real continuous-batching engine in CI, on a machine with no
GPU and no model download. ``build`` fetches the ``llama-cpp-python`` sdist through pip (it vendors
llama.cpp's full source) and builds ``llama-server`` once into a cache; ``tiny_model`` writes a
seeded random-weight llama GGUF around one of the vocab-only GGUFs shipped in that source;
``python -m tools.llamacpp`` does both and prints the two paths. Nothing here starts the server
(``loadgen.launchers`` does) and nothing here imports Locust.
"""
