"""megatron-core as its users write it for GPUs: a tiny GPT, tensor parallel over every rank, Megatron's own
DDP wrapper and distributed optimizer (whose parameter checks are ``param.type() == 'torch.cuda.FloatTensor'``),
nccl, torch.cuda, and the float64 all-reduces Megatron-LM's training loop makes of its start-up timestamps. Run
under torchrun; each rank writes OUT.rank<N>.json with its losses.

    python -m torch.distributed.run --nproc_per_node N mcore_tp.py OUT
"""
import json
import os
import sys

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig

SEQ, VOCAB, BATCH, STEPS = 16, 64, 4, 3


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group(backend="nccl", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    stamp = torch.tensor([1.7e9 + 0.125 * (rank + 1)], dtype=torch.double, device="cuda")
    torch.distributed.all_reduce(stamp, op=torch.distributed.ReduceOp.MIN)
    total = torch.tensor([1.7e9 + rank], dtype=torch.double, device="cuda")
    torch.distributed.all_reduce(total)
    torch.manual_seed(123)
    model_parallel_cuda_manual_seed(123)
    config = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, use_cpu_initialization=True,
                               pipeline_dtype=torch.float32, hidden_dropout=0.0, attention_dropout=0.0)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=VOCAB,
                     max_sequence_length=SEQ).cuda()
    assert next(model.parameters()).is_cuda
    model = DistributedDataParallel(config=config, module=model, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=False, overlap_grad_reduce=False, use_distributed_optimizer=True))
    optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True),
                                       [model])
    data = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=data) for _ in range(STEPS)]
    position_ids = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(BATCH, SEQ)
    mask = torch.tril(torch.ones(1, 1, SEQ, SEQ, device="cuda")) < 0.5

    def forward_step(iterator, model):
        tokens = next(iterator).cuda()
        out = model(tokens[:, :-1], position_ids, mask, labels=tokens[:, 1:])
        return out, lambda output: (output.float().mean(), {"loss": output.float().mean()})

    losses = []
    for batch in batches:
        model.zero_grad_buffer()
        optimizer.zero_grad()
        result = get_forward_backward_func()(forward_step_func=forward_step, data_iterator=iter([batch]),
                                             model=model, num_microbatches=1, seq_length=SEQ,
                                             micro_batch_size=BATCH, forward_only=False)
        finalize_model_grads([model])
        optimizer.step()
        losses.append(result[0]["loss"].item())
    with open(f"{sys.argv[1]}.rank{rank}.json", "w") as fh:
        json.dump({"losses": losses, "device": str(next(model.parameters()).device),
                   "optimizer": type(optimizer).__name__, "float64_min": stamp.item(), "float64_sum": total.item()},
                  fh)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
