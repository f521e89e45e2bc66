from pfedkit.engine.plans import local_update, run_plan, train_client

__all__ = ["local_update", "run_plan", "train_client"]
