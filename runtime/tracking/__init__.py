"""Experiment trackers: danlu's spend and recoveries beside the user's metrics, where people look.

``[tracking]`` in job.toml (:mod:`planner.job_tracking`) names MLflow, Weights & Biases and/or
TensorBoard. The pieces, one job each:

* :mod:`runtime.tracking.launch` -- what the controller tells the training processes
  (``DANLU_TRACKING``: the trackers and the run's key, so every launch of one run logs to
  the same tracker run);
* :mod:`runtime.tracking.meter` -- ``work/meter.json``, the spend figures the controller
  writes at each heartbeat for the session to log (a cloud's nodes get a copy through the
  run's stage);
* :mod:`runtime.tracking.hub` -- the session's side: a background thread that feeds every
  tracker, so a slow or broken tracker never stalls or stops training (a failure is
  reported once, then that tracker is left alone);
* :mod:`runtime.tracking.mlflow_backend`, :mod:`~runtime.tracking.wandb_backend`,
  :mod:`~runtime.tracking.tensorboard_backend` -- one module per tracker, each an extra;
* :mod:`runtime.tracking.rewind` -- the controller's side before a launch that resumes: the
  values a lost launch logged past the checkpoint give way to the re-trained ones;
* :mod:`runtime.tracking.final` -- the controller's side at the end: the run report as an
  artifact of the same tracker run.
"""

ENV_TRACKING = "DANLU_TRACKING"
"""The launch variable that names the trackers (here, so checking for it imports nothing)."""
