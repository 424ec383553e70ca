"""`sluice decontam evaluate`: measure detectors on a labelled file and calibrate thresholds."""

from __future__ import annotations

from pathlib import Path

import typer


def register(decontam_app: typer.Typer) -> None:
    @decontam_app.command("evaluate")
    def evaluate_cmd(
        labels: Path = typer.Option(
            ..., "--labels", help="labelled JSONL (contam_dev.jsonl format)"
        ),
        out: Path = typer.Option(
            ..., "--out", help="folder for evaluation.json/.md, sweeps, scores"
        ),
        detectors: str | None = typer.Option(
            None,
            "--detectors",
            help="comma-separated detectors (default: the default set of `sluice decontam "
            "detectors`; missing ones are skipped with a note)",
        ),
        benchmarks: str = typer.Option(
            "aime24,aime25,lcb_v5,lcb_v6", "--benchmarks", help="comma-separated benchmarks"
        ),
        calibrate: bool = typer.Option(
            False, "--calibrate", help="propose thresholds for --target-fpr"
        ),
        target_fpr: float | None = typer.Option(
            None,
            "--target-fpr",
            help="calibration target FPR (default 0.005; needs --calibrate or --cv-folds)",
        ),
        cv_folds: int = typer.Option(
            0,
            "--cv-folds",
            help="also cross-validate the calibration with K folds grouped by benchmark item "
            "(out-of-fold FPR with a 95 % interval beside the in-sample figure; also at 3, 5 "
            "and 10 folds, each over --cv-deals deals of the groups)",
        ),
        cv_deals: int | None = typer.Option(
            None,
            "--cv-deals",
            help="deals of the groups into folds for the out-of-fold FPR's mean and range "
            "(default 10; 1 = only the reported deal; needs --cv-folds)",
        ),
        negatives: str | None = typer.Option(
            None,
            "--negatives",
            help="comma-separated clean pool files (JSONL) scanned as real negatives: score "
            "tails per detector and each policy's FPR on them (benchmark copies found in them "
            "are excluded and counted)",
        ),
        negatives_limit: int | None = typer.Option(
            None, "--negatives-limit", help="only the first N rows of each negatives file"
        ),
        policy: Path | None = typer.Option(
            None, "--policy", help="policy file (JSON/TOML) for the combined decision"
        ),
        judge_base_url: str | None = typer.Option(
            None,
            "--judge-base-url",
            help="add the LLM judge: OpenAI-compatible base URL, e.g. http://localhost:8000/v1",
        ),
        judge_model: str | None = typer.Option(
            None, "--judge-model", help="model name for the judge endpoint"
        ),
        embedding_backend: str = typer.Option(
            "auto",
            "--embedding-backend",
            help="embedding backend for every detector that uses the model: auto (what runs use "
            "by default) | torch | torch-bf16 | onnx | onnx-int8",
        ),
        judge_ceiling: bool = typer.Option(
            False,
            "--judge-ceiling",
            help="also report what a perfect LLM judge could reach on top of the policy (no "
            "model needed: only the judge's candidate pairs are generated)",
        ),
    ) -> None:
        """Run detectors over labelled rows; report precision/recall per kind and FPRs."""
        from rich.console import Console

        from curation.errors import ConfigError
        from curation.rundir import check_out_folder
        from decontam.embedding import BACKENDS
        from decontam.evaluate import EvalConfig, evaluate, write_outputs
        from decontam.policy import PolicyConfig
        from decontam.registry import detector_class
        from decontam.run import takes_embedding_model

        check_out_folder(out, holds="the evaluation (evaluation.json/.md, sweeps, scores)")
        console = Console(stderr=True)
        names = (
            [d.strip() for d in detectors.split(",") if d.strip()]
            if detectors
            else EvalConfig().detectors
        )
        if target_fpr is not None:
            if not 0.0 <= target_fpr < 1.0:
                raise ConfigError(
                    f"--target-fpr must be in [0, 1), got {target_fpr}",
                    hint="e.g. --target-fpr 0.005",
                )
            if not (calibrate or cv_folds):
                raise ConfigError(
                    "--target-fpr would be ignored: only calibration uses it",
                    hint="add --calibrate (or --cv-folds K), or leave --target-fpr out",
                )
        if cv_deals is not None and not cv_folds:
            raise ConfigError(
                "--cv-deals would be ignored: only the cross-validation deals folds",
                hint="add --cv-folds K, or leave --cv-deals out",
            )
        if embedding_backend not in BACKENDS:
            raise ConfigError(
                f"--embedding-backend {embedding_backend!r} is not a backend",
                hint="use " + ", ".join(BACKENDS),
            )
        det_cfgs: dict = {}
        if embedding_backend != "auto":  # the default keeps the shipped evaluation's config
            det_cfgs["embedding"] = {"backend": embedding_backend}
        if judge_base_url or judge_model:
            if "judge" not in names:
                names.append("judge")
            det_cfgs["judge"] = {"base_url": judge_base_url, "model": judge_model}
        cfg = EvalConfig(
            detectors=names,
            benchmarks=[b.strip() for b in benchmarks.split(",") if b.strip()],
            target_fpr=EvalConfig().target_fpr if target_fpr is None else target_fpr,
            detector_configs=det_cfgs,
            cv_deals=EvalConfig().cv_deals if cv_deals is None else cv_deals,
        )

        def embeds(name: str) -> bool:
            try:
                return name == "embedding" or takes_embedding_model(detector_class(name))
            except (ConfigError, ImportError):  # not in this build: evaluate skips it, notes it
                return False

        if embedding_backend != "auto" and not any(embeds(d) for d in cfg.detectors):
            raise ConfigError(
                f"--embedding-backend would be ignored: --detectors {','.join(cfg.detectors)} "
                "uses no embedding model (only embedding, fuzzy and judge do)",
                hint="add embedding to --detectors, or leave --embedding-backend out",
            )
        neg_files = [n.strip() for n in negatives.split(",") if n.strip()] if negatives else []
        if negatives is not None and not neg_files:
            raise ConfigError(
                f"--negatives {negatives!r} names no file",
                hint="give comma-separated clean pool files (JSONL), or leave the option out",
            )
        pol = PolicyConfig.from_file(policy, over_default=True) if policy else None
        # the detectors' scan shows its progress as `decontam run`'s does (a bar on a terminal,
        # else a log line every few seconds); each stage is a line of its own (a spinner
        # would be a second live display beside the bar, and says nothing in a log)
        result = evaluate(
            labels,
            cfg,
            policy=pol,
            calibrate_thresholds=calibrate,
            judge_ceiling=judge_ceiling,
            cv_folds=cv_folds,
            negatives=neg_files or None,
            negatives_limit=negatives_limit,
            progress=lambda msg: console.print(f"evaluate: {msg}", highlight=False),
            show_progress=True,
        )
        paths = write_outputs(result, out)
        comb = result["combined"]
        typer.echo(
            f"combined: precision {comb['item']['precision']:.3f} recall {comb['item']['recall']:.3f} "
            f"FPR(all clean) {comb['fpr_by_kind']['all_clean']['fpr']:.4f}"
        )
        for n in result["notes"]:
            typer.echo(f"note: {n}")
        if "calibration" in result:
            cal = result["calibration"]
            rules = [
                " & ".join(f"{d}>={v}" for d, v in sorted(rule.items())) for rule in cal["rules"]
            ]
            typer.echo(
                "calibrated thresholds: "
                + ", ".join(f"{k}={v}" for k, v in cal["thresholds"].items())
                + "".join(f"; rule {r}" for r in rules)
                + (f" (only through a rule: {', '.join(cal['evidence_only'])})" if rules else "")
            )
        if "cross_validation" in result:
            cv = result["cross_validation"]
            for name, part in (
                ("in sample", result["calibration"]),
                (f"{cv['folds']}-fold out of fold", cv),
            ):
                m = part["combined"]
                f = m["fpr_by_kind"]["lookalike+near_miss"]
                lo, hi = part["fpr_ci95"]["lookalike+near_miss"]
                typer.echo(
                    f"calibrated, {name}: FPR(look+near) {f['fpr']:.4f} [{lo:.4f}, {hi:.4f}] "
                    f"recall {m['item']['recall']:.3f}"
                )
            for k, part in cv.get("by_fold_count", {}).items():  # the budget at any fold count
                f = part["fpr_by_kind"]["lookalike+near_miss"]
                lo, hi = part["fpr_ci95"]["lookalike+near_miss"]
                typer.echo(
                    f"  {k}-fold out of fold: FPR(look+near) {f['fpr']:.4f} [{lo:.4f}, {hi:.4f}] "
                    f"({f['fp']}/{f['n']})"
                )
            od = cv.get("over_deals")
            for k, v in (od or {}).get("by_fold_count", {}).items():  # ... and at any deal
                typer.echo(
                    f"  {k}-fold over {od['deals']} deals: mean FPR(look+near) "
                    f"{v['mean_fpr']:.4f}, range {v['min_fpr']:.4f}-{v['max_fpr']:.4f}, "
                    f"{v['deals_over_budget']} over the {od['budget']:.1%} budget"
                )
        if "negatives" in result:
            neg = result["negatives"]
            typer.echo(
                f"real negatives: {neg['kept']} kept, {neg['excluded_as_benchmark_copies']} "
                "excluded as benchmark copies"
            )
            for name, p in neg["policies"].items():
                lo, hi = p["ci95"]
                typer.echo(
                    f"  {name}: FPR {p['fpr']:.4f} [{lo:.4f}, {hi:.4f}] ({p['fp']}/{p['n']})"
                )
        if "judge_ceiling" in result:
            jc = result["judge_ceiling"]
            rec = jc["combined"]["recall_by_kind"]
            typer.echo(
                f"judge ceiling ({jc['candidate_pairs']} pairs for {jc['rows']} rows): "
                + ", ".join(f"{k} {v['item']:.2f}" for k, v in rec.items())
            )
        typer.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
