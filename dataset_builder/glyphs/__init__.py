"""The embedded "glyphs" benchmark: rendered characters as an offline, deterministic stand-in for ImageNet.

ID classes are Latin capitals and digits; the OOD pool is every other character the DejaVu fonts
shipped with matplotlib draw, filtered by rules that mirror the ImageNet ones (Unicode relations
for WordNet's is-a relations, rendered look-alikes for "visually ambiguous").
"""
