"""edgeflex's own commands: a simulation run (``run``), a local federation (``federation``), a
comparison over seeds (``compare``) and what they need (run configs, processes, progress, app
bundles, certificates, a broker, a stream publisher), and tables and plots of finished runs."""
