"""More than one event loop: loadgen processes (--workers) and Ray actors (--ray)."""

# time every worker is given to start before the one schedule begins (processes: from launch;
# Ray actors: after every actor answered its clock pings)
START_AFTER_S = 3.0
