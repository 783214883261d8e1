"""TensorBoard: event files under ``<log_dir>/<run key>/``, written with tensorboard's own writer.

Not ``torch.utils.tensorboard``: the controller writes the final report here too, and the
controller never imports torch. Every training launch first writes TensorBoard's "restart at
N+1" marker, N the step it starts from (0 from scratch) -- what ``SummaryWriter(purge_step=N+1)``
writes -- so the values a lost launch logged past its last checkpoint are dropped from every
chart and the re-trained ones are the steps' only values. (They stay in the lost launch's
event file, which TensorBoard reads in order of creation.)

TensorBoard keeps no files, so the run report goes in as a text summary (its figures) and
as ``report.html`` beside the event files.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from danlu.extras import require
from planner.job_tracking import TensorboardTracking
from runtime.tracking.launch import TrackingLaunch

__all__ = ["TensorboardBackend"]


class TensorboardBackend:
    name = "tensorboard"

    def __init__(self, launch: TrackingLaunch, config: TensorboardTracking, cwd: Path):
        self.launch = launch
        self.dir = cwd / config.log_dir / launch.key
        self.writer = None

    def open(self, *, resumed_step: int | None) -> None:
        require("tensorboard", "tensorboard", feature="[tracking.tensorboard]")
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(self.dir), flush_secs=5)
        if resumed_step is not None:
            self.writer.add_event(Event(wall_time=time.time(), step=resumed_step + 1,
                                        session_log=SessionLog(status=SessionLog.START)))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))

    def set_tags(self, step: int, tags: dict[str, str]) -> None:
        self.text(step, "danlu/tags", "\n".join(f"* **{k}**: {v}" for k, v in sorted(tags.items())))

    def text(self, step: int, tag: str, markdown: str) -> None:
        """A text summary (TensorBoard's Text tab renders it as Markdown)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype="DT_STRING", string_val=[markdown.encode("utf-8")],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        value = Summary.Value(tag=tag, metadata=meta, tensor=tensor)
        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[value])))

    def log_file(self, path: Path, name: str) -> None:
        shutil.copyfile(path, self.dir / name)

    def finish(self, status: str) -> None:
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
