"""The typed face-swap core shared by the image command, Ray Data stages, Serve and live streams.

Imports neither ray nor fastapi. Modules: ``facebatch`` (per-face arrays), ``layout`` (crop
geometry), ``modelset`` (loaded models and their info), ``swapper`` (inswapper and classic
backends), ``identity`` (source faces -> identity), ``provenance`` (stand-in labelling),
``chain`` (detect/select/align, swap, paste, enhance), ``steps`` (the chain declared once),
``frames`` (whole frames through it), ``tracking`` (faces followed through a video or stream).
"""
