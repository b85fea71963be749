"""Engine launchers: start, health-wait, stop and restart the engine under test as a local process.

Kinds: the embedded engine, ``vllm serve``, SGLang, llama.cpp's ``llama-server``, and any shell
command. Modules: ``spec`` is the scenario's ``[launcher]``, ``[cold_boot]`` and ``[matrix]`` data
(pydantic only: ``loadgen.core.scenario`` imports it), ``commands`` builds each kind's command line
(pure), ``health`` starts a process and polls its health URL, ``launcher`` ties them together.
This package file imports nothing, so reading a scenario never pulls in process or HTTP code.
No Locust imports anywhere here.
"""
