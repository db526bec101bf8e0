# TEST DOUBLE entry point for the verlctl test image; NOT verl. tests/image/build.sh copies this file to the
# paths of verl's training entry modules under /verl (verl/trainer/main_ppo.py, recipe/dapo/main_dapo.py,
# recipe/one_step_off_policy/main_ppo.py, verl/experimental/one_step_off_policy/main_ppo.py). Like the real
# modules it is a @hydra.main with config_path="config" (the config dir next to this file), so Hydra parses
# the command line, composes the config and reports errors exactly as verl's `main` would; the work is then
# done by the stand-in trainer, tests/standin/standin_trainer.py (installed on sys.path by a .pth file).
import hydra
import standin_trainer


@hydra.main(
    config_path="config", config_name=standin_trainer.default_config_name(__file__), version_base=None
)
def main(config):
    standin_trainer.run(config, entry_file=__file__)


if __name__ == "__main__":
    standin_trainer.prepare(__file__)
    main()
