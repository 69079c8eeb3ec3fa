"""What the glyph benchmark is, known without its builder's imports (fonts, images, shards): its id, version, ID
characters and default settings."""

import string

BENCHMARK_ID = "glyphs"
# 1.1.0: the samples carry their label (cls, format 2); the images are 1.0.0's. 1.2.0: a private part (15% of each
# class's test images, rendered from a seed drawn at build time) is held back; the public test splits are 1.1.0's less
# those images, the estimation split and the levels unchanged.
BENCHMARK_VERSION = "1.2.0"
ID_CHARS = string.ascii_uppercase + string.digits
NUM_ID_CLASSES = len(ID_CHARS)
DEFAULTS = {
    "seed": 0,
    "pool_size": 400,
    "images_per_class": 200,
    "n_test": 50,
    "id_test_per_class": 50,
    "id_train_per_class": 300,
    "rule_sets": {"visually_ambiguous": True},
    "private_share": 0.15,  # held back in the private part (dataset_builder.private)
    "private_seed": None,  # drawn from secrets by each build, kept in its private manifest only
}
