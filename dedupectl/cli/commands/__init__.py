"""The commands: one module per top-level command or command group, named after it (``run``, ``snapshot``…).

Two families of top-level commands share a module named after the core package they front: ``store``
(``window``, ``age``, ``stats``…, over ``store/``) and ``spark`` (``audit``, ``replay``, ``rebuild``, over
``dedupectl/spark/``). Each module exposes ``register(app)``; what commands share (options, tables, progress,
logging) lives one level up, in ``dedupectl/cli/``.
"""
