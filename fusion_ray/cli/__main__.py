"""``python -m fusion_ray.cli``: the same as the ``fusion-ray`` console script."""

import sys

from fusion_ray.cli import main

sys.exit(main())
