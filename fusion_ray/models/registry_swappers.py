"""Registry rows of the optional swappers, embedding converters and enhancers (FaceFusion 3.8.1).

Facts from FaceFusion's ``face_swapper`` and ``face_enhancer`` model sets,
read for facts: release, template, size, mean/std, how the source goes in, the output mapping
and the licence its model set states. Normalisation is in pixel units as everywhere in the
registry (FaceFusion's mean 0.5 = 127.5 here). The output of ghost, hififace, hyperswap and
uniface is de-normalised with the same mean/std (``output_range`` (-1, 1)); inswapper, simswap
and blendswap give [0, 1]. Enhancers: ((RGB / 255) - 0.5) / 0.5 in, [-1, 1] out; codeformer has
the optional ``weight`` input (float64, shape (1,); FaceFusion's default 0.5).

``inswapper_128`` / ``_fp16`` and ``gfpgan_1.4`` are the standard set's rows (``registry.py``).
"""

from __future__ import annotations

from fusion_ray.models.registry_quality import IMAGENET_MEAN, IMAGENET_STD
from fusion_ray.models.registry_rows import facefusion_row
from fusion_ray.models.spec import ModelSpec, SourceForm, TemplateName

FACEFUSION_ASSETS_URL = "https://github.com/facefusion/facefusion-assets"
LICENCES: dict[str, tuple[str, str]] = {
    "blendswap": ("non-commercial (mapooon BlendFace)", "https://github.com/mapooon/BlendFace"),
    "ghost": ("Apache-2.0 (ai-forever ghost)", "https://github.com/ai-forever/ghost/blob/main/LICENSE"),
    "hififace": ("unknown (GuijiAI HifiFace, unofficial export): not stated", "https://github.com/GuijiAI/HifiFace"),
    "hyperswap": ("ResearchRAIL (FaceFusion): research use", FACEFUSION_ASSETS_URL),
    "simswap": ("non-commercial (neuralchen SimSwap)", "https://github.com/neuralchen/SimSwap"),
    "uniface": ("unknown (xc-csc101 UniFace): not stated", "https://github.com/xc-csc101/UniFace"),
    "crossface": ("not stated in FaceFusion's model set (its embedding converters)", FACEFUSION_ASSETS_URL),
    "codeformer": ("S-Lab License 1.0: non-commercial", "https://github.com/sczhou/CodeFormer/blob/master/LICENSE"),
    "gfpgan": ("Apache-2.0", "https://github.com/TencentARC/GFPGAN/blob/master/LICENSE"),
    "gpen": ("non-commercial (yangxy GPEN)", "https://github.com/yangxy/GPEN"),
    "restoreformer": ("Apache-2.0 (RestoreFormer++)",
                      "https://github.com/wzhouxiff/RestoreFormerPlusPlus/blob/main/LICENSE"),
}

HALF = 127.5
UNIT = (0.0, 255.0)  # mean 0, std 1 in FaceFusion's [0, 1] units


def _swapper(name: str, release: str, family: str, template: TemplateName, size: int,
             mean: float | tuple[float, float, float], std: float | tuple[float, float, float],
             source_form: SourceForm, *, converter: str | None = None, source_template: TemplateName | None = None,
             source_size: int = 0, denormalised: bool = False, normalised: bool = True) -> ModelSpec:
    source = {"embedding": "the source's L2-normalised ArcFace embedding (N, 512)",
              "converted_embedding": f"the ArcFace embedding through {converter} (N, 512)",
              "crop": f"the source face as an RGB / 255 crop ({source_template}, {source_size} px)",
              "inswapper_latent": "the inswapper latent"}[source_form]
    output = "[-1, 1] (x std + mean)" if denormalised else "[0, 1]"
    return facefusion_row(
        name, release, "swapper", size, mean, std, LICENCES[family], 0.0,
        f"{family} swapper: 'target' (N, 3, {size}, {size}) {template} crop, RGB, normalised; 'source' = {source}; "
        f"output RGB in {output}.",
        template=template, source_form=source_form, converter=converter, normalise_embeddings=normalised,
        source_template=source_template,
        source_size=source_size, output_range=(-1.0, 1.0) if denormalised else (0.0, 1.0))


def _ghost(name: str) -> ModelSpec:
    return _swapper(name, "models-3.0.0", "ghost", "arcface_112_v1", 256, HALF, HALF, "converted_embedding",
                    converter="crossface_ghost", denormalised=True, normalised=False)


def _hyperswap(name: str) -> ModelSpec:
    return _swapper(name, "models-3.3.0", "hyperswap", "arcface_128", 256, HALF, HALF, "embedding",
                    denormalised=True)


def _converter(name: str) -> ModelSpec:
    return facefusion_row(name, "models-3.4.0", "converter", 0, 0.0, 1.0, LICENCES["crossface"], 0.0,
                          "ArcFace embedding converter: 'input' (N, 512) ArcFace embedding -> (N, 512) embedding "
                          "in the swapper's identity space (FaceFusion normalises it for simswap and hififace).")


def _enhancer(name: str, family: str, template: TemplateName, size: int, *, weight: bool = False) -> ModelSpec:
    weight_text = "; optional 'weight' (1,) float64 (fidelity, default 0.5)" if weight else ""
    return facefusion_row(
        name, "models-3.0.0", "enhancer", size, HALF, HALF, LICENCES[family], 0.0,
        f"{family} face restoration: 'input' (N, 3, {size}, {size}) {template} crop, RGB, (x / 255 - 0.5) / 0.5"
        f"{weight_text}; output RGB in [-1, 1], blended over the original (80% by default).",
        template=template, output_range=(-1.0, 1.0), weight_input=weight)


SWAPPER_SPECS: tuple[ModelSpec, ...] = (
    _hyperswap("hyperswap_1a_256"),
    _hyperswap("hyperswap_1b_256"),
    _hyperswap("hyperswap_1c_256"),
    _swapper("simswap_256", "models-3.0.0", "simswap", "arcface_112_v1", 256, IMAGENET_MEAN, IMAGENET_STD,
             "converted_embedding", converter="crossface_simswap"),
    _swapper("simswap_unofficial_512", "models-3.0.0", "simswap", "arcface_112_v1", 512, *UNIT,
             "converted_embedding", converter="crossface_simswap"),
    _ghost("ghost_1_256"),
    _ghost("ghost_2_256"),
    _ghost("ghost_3_256"),
    _swapper("hififace_unofficial_256", "models-3.1.0", "hififace", "mtcnn_512", 256, HALF, HALF,
             "converted_embedding", converter="crossface_hififace", denormalised=True),
    _swapper("blendswap_256", "models-3.0.0", "blendswap", "ffhq_512", 256, *UNIT, "crop",
             source_template="arcface_112_v2", source_size=112),
    _swapper("uniface_256", "models-3.0.0", "uniface", "ffhq_512", 256, HALF, HALF, "crop",
             source_template="ffhq_512", source_size=256, denormalised=True),
    _converter("crossface_simswap"),
    _converter("crossface_ghost"),
    _converter("crossface_hififace"),
)

ENHANCER_SPECS: tuple[ModelSpec, ...] = (
    _enhancer("codeformer", "codeformer", "ffhq_512", 512, weight=True),
    _enhancer("gpen_bfr_256", "gpen", "arcface_128", 256),
    _enhancer("gpen_bfr_512", "gpen", "ffhq_512", 512),
    _enhancer("gpen_bfr_1024", "gpen", "ffhq_512", 1024),
    _enhancer("gpen_bfr_2048", "gpen", "ffhq_512", 2048),
    _enhancer("restoreformer_plus_plus", "restoreformer", "ffhq_512", 512),
    _enhancer("gfpgan_1.2", "gfpgan", "ffhq_512", 512),
    _enhancer("gfpgan_1.3", "gfpgan", "ffhq_512", 512),
)
