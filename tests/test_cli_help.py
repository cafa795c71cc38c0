"""Every argument of every command line (`dspark`, `trials`, `analysis`) has help text,
and every default is shown in it."""

import argparse

import pytest

from analysis.cli import build_parser as analysis_parser
from dspark.cli import build_parser as dspark_parser
from trials.cli import build_parser as trials_parser


def subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


@pytest.mark.parametrize("build", [dspark_parser, trials_parser, analysis_parser], ids=["dspark", "trials", "analysis"])
def test_every_argument_has_help_showing_its_default(build):
    commands = list(subparsers(build()))
    assert commands
    for name, sub in commands:
        fmt = sub._get_formatter()
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = fmt._expand_help(action) if action.help else ""
            assert text, f"{name} {action.dest}: no help"
            if action.default not in (None, False, argparse.SUPPRESS) or action.option_strings and not action.required \
                    and action.nargs != 0:
                assert "default" in text, f"{name} {action.dest}: help shows no default: {text!r}"
