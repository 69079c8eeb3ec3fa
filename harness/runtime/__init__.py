"""The harness's runtime: reading and decoding shards (``data``, ``decoding``, ``decoded_cache``), running the model
(``execution``, ``inference``, ``distributed``), the sandbox of a submission file (``isolation``, ``sandbox``,
``limits``, ``child``, ``serving``, ``channel``, ``bundle``) and the score cache (``score_cache``). The entry points
(:mod:`harness.run`, :mod:`harness.cli`) drive it; the method (:mod:`harness.method`) and the kappas
(:mod:`harness.kappas`) never import it."""
