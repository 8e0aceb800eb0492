#!/usr/bin/env python3
"""Writes resources/imagenet-classes.json, VARScope's class list for the ImageNet-1k models.

Names: torchvision's `_IMAGENET_CATEGORIES` (torchvision/models/_meta.py, BSD-3-Clause), one
name per class in the standard ImageNet-1k index order, with the duplicates disambiguated
("crane" / "crane bird"). Only the list literal is read (ast.literal_eval); nothing is imported.

Aliases (optional): torchvision lists one name per class, so the other WordNet synonyms come
from timm's data files (timm/data/_info/imagenet_synsets.txt and imagenet_synset_to_lemma.txt,
timm is Apache-2.0; the lemmas are WordNet's). Without --timm-info the aliases stay empty.

    pip download --no-deps torchvision==0.26.0 -d /tmp/tv
    unzip -o /tmp/tv/torchvision-0.26.0-*.whl torchvision/models/_meta.py -d /tmp/tv
    pip download --no-deps timm==1.0.31 -d /tmp/timm
    unzip -o /tmp/timm/timm-1.0.31-*.whl 'timm/data/_info/*' -d /tmp/timm
    python3 tools/make_imagenet_classes.py /tmp/tv/torchvision/models/_meta.py \
        --timm-info /tmp/timm/timm/data/_info --out resources/imagenet-classes.json
"""
import argparse
import ast
import json
import os
import sys


def read_categories(meta_path):
    with open(meta_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), meta_path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_IMAGENET_CATEGORIES"):
            cats = ast.literal_eval(node.value)
            break
    else:
        sys.exit(f"{meta_path}: no _IMAGENET_CATEGORIES list")
    if len(cats) != 1000 or not all(isinstance(c, str) and c for c in cats):
        sys.exit(f"{meta_path}: expected 1000 non-empty names, got {len(cats)}")
    if len(set(cats)) != 1000:
        sys.exit(f"{meta_path}: names are not unique")
    return cats


def read_synonyms(info_dir):
    with open(os.path.join(info_dir, "imagenet_synsets.txt"), encoding="utf-8") as f:
        wnids = [line.strip() for line in f if line.strip()]
    lemmas = {}
    with open(os.path.join(info_dir, "imagenet_synset_to_lemma.txt"), encoding="utf-8") as f:
        for line in f:
            wnid, _, lemma = line.rstrip("\n").partition("\t")
            lemmas[wnid] = lemma
    if len(wnids) != 1000:
        sys.exit(f"{info_dir}: expected 1000 synsets, got {len(wnids)}")
    return [[s.strip() for s in lemmas[w].split(",") if s.strip()] for w in wnids]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meta_py", help="path to torchvision/models/_meta.py")
    ap.add_argument("--timm-info", help="timm/data/_info folder, for the WordNet synonyms")
    ap.add_argument("--out", required=True, help="output JSON")
    args = ap.parse_args()

    names = read_categories(args.meta_py)
    synonyms = read_synonyms(args.timm_info) if args.timm_info else [[] for _ in names]
    source = "torchvision _IMAGENET_CATEGORIES"
    if args.timm_info:
        source += "; aliases: WordNet lemmas via timm imagenet_synset_to_lemma.txt"

    lines = []
    for i, (name, syn) in enumerate(zip(names, synonyms)):
        aliases = [s for s in syn if s.lower() != name.lower()]
        entry = {"id": i, "name": name, "short_name": "", "aliases": aliases, "category": ""}
        lines.append("  " + json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write('{"source": ' + json.dumps(source) + ', "classes": [\n')
        f.write(",\n".join(lines))
        f.write("\n]}\n")
    print(f"wrote {len(lines)} classes to {args.out}")


if __name__ == "__main__":
    main()
