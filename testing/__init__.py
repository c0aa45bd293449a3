"""What tests and benchmarks share: the real ServerApp and ClientApps in one process
(``in_process``) and hostile clients (``attacks``)."""
