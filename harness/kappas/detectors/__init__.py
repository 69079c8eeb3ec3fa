"""Detectors, one module each: the registry imports every module here, and a module registers its kappas with
:func:`~harness.kappas.base.register_kappa` on a subclass of a kind (docs/examples/flip_agreement.py is one). The
project's own score through the model in ways of their own: ``mahalanobis_odin``, ``multi_mahalanobis``, ``gram``,
``nacue``, ``rankfeat`` and ``mcm``, each pytorch-ood's method, registered with its paper by
:func:`~harness.kappas.ood_bridge.register_pytorch_ood`. What they share is :mod:`harness.kappas.layers`."""
