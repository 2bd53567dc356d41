"""Fixture: a Hugging Face Trainer script as its docs show it (tiny BERT built from a config,
synthetic data, CPU). Runs against the real `transformers` or the fake one the tests write."""

import torch
from transformers import Trainer, TrainingArguments

try:
    from transformers import BertConfig, BertForSequenceClassification
except ImportError:  # the fake transformers package has no models
    BertConfig = None


class Synthetic(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": torch.tensor(i % 2)}


if BertConfig is not None:
    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    model = BertForSequenceClassification(config)
else:
    model = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(256, 2))
args = TrainingArguments(
    output_dir="hf-out",
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    max_steps=12,
    report_to=[],
    save_strategy="no",
    logging_steps=50,
    use_cpu=True,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=Synthetic())
trainer.train()
print("trained", flush=True)
