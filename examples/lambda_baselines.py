"""The baselines of docs/models.md, "Choosing λ": scikit-learn's non-private
logistic regression and diffprivlib's LogisticRegression (objective
perturbation, its default C = 1, i.e. λ = 1/N, with the public data norm
√k so that it reads nothing private to size its noise) on the sets
`cargo run --release --example model_figures -- sweep OUT BREAST_DIR` writes,
test accuracy and AUC averaged over as many draws as the Rust figures use.

    python3 -m venv /tmp/venv
    /tmp/venv/bin/pip install "scikit-learn<1.6" diffprivlib pandas
    /tmp/venv/bin/python examples/lambda_baselines.py OUT BREAST_DIR

(diffprivlib 0.6 imports names scikit-learn 1.6 removed.)
"""

import sys
import warnings

import numpy as np
import pandas as pd
from diffprivlib.models import LogisticRegression as PrivateLogisticRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

warnings.filterwarnings("ignore")


def load(directory):
    train = pd.read_csv(f"{directory}/train.csv")
    test = pd.read_csv(f"{directory}/test.csv")
    return train.iloc[:, 2:].values, train.y.values, test.iloc[:, 2:].values, test.y.values


def main(out, breast):
    sets = [
        (f"synthetic-{n}", f"{out}/synthetic-{n}", draws, epsilons)
        for n, draws, epsilons in [
            (1000, 40, [0.1, 1, 10]),
            (10000, 20, [0.1, 1, 10]),
            (100000, 6, [0.1, 1, 10]),
            (1000000, 3, [1]),
        ]
    ] + [("breast-cancer", breast, 100, [0.1, 1, 10])]
    print("| set | non-private acc / AUC | ε | diffprivlib acc / AUC |")
    print("|---|---|---|---|")
    for name, directory, draws, epsilons in sets:
        x, y, x_test, y_test = load(directory)
        k = x.shape[1]
        clear = LogisticRegression(C=1e6, max_iter=5000).fit(x, y)
        clear_figures = (
            f"{clear.score(x_test, y_test):.4f} / "
            f"{roc_auc_score(y_test, clear.decision_function(x_test)):.4f}"
        )
        for epsilon in epsilons:
            accuracy, auc = [], []
            for seed in range(draws):
                model = PrivateLogisticRegression(
                    epsilon=epsilon, data_norm=np.sqrt(k), random_state=seed
                ).fit(x, y)
                accuracy.append(model.score(x_test, y_test))
                auc.append(roc_auc_score(y_test, model.decision_function(x_test)))
            print(
                f"| {name} | {clear_figures} | {epsilon} | "
                f"{np.mean(accuracy):.4f} / {np.mean(auc):.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
