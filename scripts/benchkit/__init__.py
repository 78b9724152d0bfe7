"""Shared measuring code of the benchmark scripts in ``scripts/``.

The scripts keep their workload, cases and targets; what they share lives here:

* :mod:`benchkit.proc`: process trees from ``/proc`` (discovery, PSS, CPU seconds, killing),
  CPU seconds of the machine (``/proc/stat``), free disk, and :class:`~benchkit.proc.Sampler`,
  a background thread recording peak memory, load and CPU over a run;
* :mod:`benchkit.tables`: number formatting, markdown tables, rich console tables;
* :mod:`benchkit.plots`: matplotlib without a display, saving figures;
* :mod:`benchkit.docs`: replacing a generated section (between two markers) of a markdown file;
* :mod:`benchkit.debs_report`: the DEBS benchmark's results (the ``results.json`` shape), its
  console tables, and the generated section and plots of ``docs/performance.md``: shared by
  ``scripts/bench_debs.py`` (measures) and ``scripts/bench_docs.py`` (renders).

A script run as ``python scripts/NAME.py`` has ``scripts/`` on ``sys.path``, so it imports
``from benchkit import proc``.
"""
