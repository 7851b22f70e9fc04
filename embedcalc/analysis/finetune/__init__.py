"""Fine-tuning terms (DESIGN §18): the modules adapters attach to under transformers' names (``naming``,
``modules``), trainable and total parameters as peft counts them (``adapters``), and the memory of a fine-tune on
each device (``memory``). Plain arithmetic, like the rest of :mod:`embedcalc.analysis`.
"""
