"""docs/python.md's lists against the package: the ops, the Keras layers,
the callbacks and the fit options it names are the ones that exist."""
import os
import re

import tandem

SOURCE = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
# Code blocks' fences would pair with inline backticks.
DOC = re.sub(r"```.*?```", "", open(os.path.join(SOURCE, "docs", "python.md")).read(), flags=re.S)


def section(title):
    start = DOC.index(title)
    end = DOC.find("\n## ", start + len(title))
    return DOC[start:end if end >= 0 else None]


def names_in(text, pattern=r"[a-z_0-9]+"):
    """The backticked names in text (a call's parentheses and an option's value dropped)."""
    return {m for m in (re.sub(r"(\(.*\)|=.*)$", "", t) for t in re.findall(r"`([^`]+)`", text))
            if re.fullmatch(pattern, m)}


def public(module, capitalised=False):
    return {n for n in dir(module) if not n.startswith("_") and (n[0].isupper() == capitalised)}


def test_the_ops_list_is_the_ops():
    documented = names_in(section("## Ops (`tandem.ops`)")) - {"tandem"}
    assert documented == public(tandem.ops)


def test_the_keras_layers_list_is_the_layers():
    models = section("## Models")
    listed = models[models.index("`tandem.layers`"):models.index("each written as a model")]
    assert names_in(listed, r"[A-Z][A-Za-z0-9]+") == public(tandem.layers, capitalised=True) - {"Layer"}


def test_every_callback_is_documented():
    documented = names_in(DOC, r"[A-Z][A-Za-z]+")
    missing = public(tandem.callbacks, capitalised=True) - {"Callback", "ProgressLogger"} - documented
    assert not missing


def test_every_fit_option_is_documented():
    training = section("## Training")
    # Set by fit's and compile's own arguments rather than as options.
    implied = {"optimizer", "objective", "epochs", "batch_size"}
    options = set(tandem._tandem.train.option_names()) - implied
    run_outputs = {"monitor", "metrics_every", "tensorboard", "trace_steps"}
    assert not (options | run_outputs) - names_in(training)
