"""``fusion-ray bench pixel-boost | masks | mask-pictures | mask-chain``: the mask and pixel-boost building blocks (no Ray).

Each prints one JSON line per measurement (:mod:`fusion_ray.bench.quality`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    text = ("pixel boost on the inswapper STAND-IN: every tile of every face in one batched call against "
            "FaceFusion's k^2 batch-1 calls per face")
    boost = sub.add_parser("pixel-boost", help=text, description=text + ".")
    boost.add_argument("--sizes", default="256,512,1024", help="boost sizes, multiples of 128")
    boost.add_argument("--faces", type=int, default=1)
    boost.add_argument("--repeats", type=int, default=3)
    boost.add_argument("--variant", choices=("light", "cost_faithful"), default="light")
    boost.add_argument("--threads", type=int, default=2)
    boost.set_defaults(run=run_pixel_boost)
    text = "each landmark mask's cost per face (box, area, mouth, the minimum)"
    masks = sub.add_parser("masks", help=text, description=text + ".")
    masks.add_argument("--crop", type=int, default=256)
    masks.add_argument("--repeats", type=int, default=20)
    masks.set_defaults(run=run_masks)
    text = ("the README's mask pictures: box, area and mouth masks with the real dlib_68 landmarker and the "
            "classic swapper on a photo")
    pictures = sub.add_parser("mask-pictures", help=text, description=text + ".")
    pictures.add_argument("--target", type=Path, required=True)
    pictures.add_argument("--source", type=Path, required=True)
    pictures.add_argument("--detector", type=Path, required=True, help="the SCRFD 2.5g ONNX file")
    pictures.add_argument("--out", type=Path, required=True, help="folder for masks.png and swaps.png")
    pictures.set_defaults(run=run_mask_pictures)
    text = ("the mask steps through the chain: box alone, + area + mouth (real dlib_68), + occlusion + region "
            "(STAND-INS), each step's ms per frame")
    chain = sub.add_parser("mask-chain", help=text, description=text + ".")
    chain.add_argument("--target", type=Path, required=True)
    chain.add_argument("--source", type=Path, required=True)
    chain.add_argument("--detector", type=Path, required=True, help="the SCRFD 2.5g ONNX file")
    chain.add_argument("--repeats", type=int, default=5)
    chain.set_defaults(run=run_mask_chain)


def run_pixel_boost(args: argparse.Namespace) -> int:
    from fusion_ray.bench.quality import pixel_boost_bench

    sizes = tuple(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="fusion_ray_boost_") as work:
        for row in pixel_boost_bench(Path(work), sizes=sizes, faces=args.faces, repeats=args.repeats,
                                     variant=args.variant, threads=args.threads):
            print(json.dumps(row))
    return 0


def run_masks(args: argparse.Namespace) -> int:
    from fusion_ray.bench.quality import mask_bench

    for row in mask_bench(crop_size=args.crop, repeats=args.repeats):
        print(json.dumps(row))
    return 0


def run_mask_chain(args: argparse.Namespace) -> int:
    from fusion_ray.bench.mask_chain import mask_chain_bench

    for row in mask_chain_bench(args.target, args.source, args.detector, args.repeats):
        print(json.dumps(row))
    return 0


def run_mask_pictures(args: argparse.Namespace) -> int:
    from fusion_ray.bench.mask_pictures import make_pictures

    for path in make_pictures(args.target, args.source, args.detector, args.out):
        print(path)
    return 0
