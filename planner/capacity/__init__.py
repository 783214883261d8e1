"""`planner capacity`: how much to reserve for a team's demand over months, and how to replay it online.

demand.py reads the demand file (forecast or job trace) into per-period GPU-hours;
offers.py turns the catalog into the prices each GPU class can be served at;
model.py is the MILP; report.py the baselines, sensitivity and JSON; plot.py the chart;
replay.py the online mode; queue_spec.py, queue.py and queue_report.py the queue mode
(a queue of jobs scheduled onto held reservations and spot/on-demand, slot by slot);
sparse_milp.py hands the models to HiGHS.
"""
