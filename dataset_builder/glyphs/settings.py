"""What the glyph benchmark is, known without its builder's imports (fonts, images, shards): its id, version, ID
characters and default settings."""

import string

BENCHMARK_ID = "glyphs"
BENCHMARK_VERSION = "1.1.0"  # 1.1.0: the samples carry their label (cls, format 2); the images are 1.0.0's
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
    "private_share": 0.0,  # no private part yet (dataset_builder.private)
    "private_seed": None,
}
