"""describe_error: any error, a Ray worker's included, as one line (the cause, no traceback, no ANSI)."""

import pytest

from fusion_ray.errors import InputError, describe_error, one_line


def test_plain_errors_are_their_type_and_message() -> None:
    assert describe_error(InputError("file not found: x.png")) == "file not found: x.png"
    assert describe_error(ValueError("bad\nvalue")) == "ValueError: bad; value"
    assert describe_error(KeyError("k")) == "KeyError: 'k'"


def test_one_line_keeps_the_item_and_the_last_exception_of_a_traceback() -> None:
    text = ("clip.mp4: ActorDiedError: The actor died because of an error raised in its creation task, "
            "\x1b[36mray::MapWorker(MapBatches(FusedStage)).__init__()\x1b[39m (pid=1, ip=10.0.0.1)\n"
            "  File \"/x/build.py\", line 80, in __init__\n    self.stages = [spec.build() for spec in specs]\n"
            "           ^^^^^^^^^^^^\nfusion_ray.errors.ModelIntegrityError: model 'inswapper_128' does not match\n")
    assert one_line(text) == "clip.mp4: ModelIntegrityError: model 'inswapper_128' does not match (in a Ray worker)"
    assert one_line("\x1b[31mred\x1b[0m alert") == "red alert"


class _Raises:
    def __init__(self) -> None:
        raise InputError("no face in \x1b[1msource.png\x1b[0m")

    def ping(self) -> int:
        return 1


def _fails() -> None:
    raise ValueError("frame 7 is \x1b[31mbroken\x1b[0m")


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_errors_from_ray_workers_are_their_cause() -> None:
    import ray

    with pytest.raises(ray.exceptions.RayTaskError) as task:
        ray.get(ray.remote(num_cpus=0.1)(_fails).remote())
    assert "\n" in str(task.value)  # Ray's own text is a traceback
    assert describe_error(task.value) == "ValueError: frame 7 is broken (in a Ray worker)"
    actor = ray.remote(num_cpus=0.1)(_Raises).remote()
    with pytest.raises(ray.exceptions.RayActorError) as died:
        ray.get(actor.ping.remote())
    assert describe_error(died.value) == "InputError: no face in source.png (in a Ray worker)"
