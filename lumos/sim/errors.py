"""Raised when a graph cannot finish: a cycle, or a wait that is never satisfied."""


class SimulationError(RuntimeError):
    def __init__(self, stuck_names: list[str], n_stuck: int, n_total: int):
        shown = ", ".join(stuck_names[:8])
        more = f" and {n_stuck - len(stuck_names[:8])} more" if n_stuck > 8 else ""
        super().__init__(f"replay cannot finish: {n_stuck} of {n_total} tasks are stuck "
                         f"(a dependency cycle or a wait never satisfied): {shown}{more}")
        self.n_stuck = n_stuck
        self.stuck_names = stuck_names
