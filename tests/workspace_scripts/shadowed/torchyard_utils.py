def value(step: int) -> float:
    return step * 0.5
