from dataclasses import dataclass


@dataclass
class GenerationHyperparameters:
    max_new_tokens: int = 16
    use_cuda_graph: bool = True  # realhf's default

    def __post_init__(self):
        if self.max_new_tokens <= 0:
            raise ValueError("max_new_tokens")
