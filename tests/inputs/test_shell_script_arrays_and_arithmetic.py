"""inputs/shell_script.py read against bash itself: the array forms, ``$'...'`` escapes and ``set --`` that a
differential run against bash showed misread without a word (turn 5). Each case is compared with what bash
prints for the same lines; what verlctl cannot read must be reported, never read as something else."""

from __future__ import annotations

import subprocess

import pytest

from verlctl.inputs.shell_script import UNRESOLVED, ScriptError, parse_script

ENTRY = "python3 -m verl.trainer.main_ppo"


def bash_words(setup: str, expr: str) -> list[str]:
    """The words bash passes for ``expr`` after the script's lines (the reference), one per line."""
    out = subprocess.run(["bash", "-c", setup + f"\nprintf '%s\\n' {expr}"], capture_output=True, text=True,
                         check=True).stdout
    return out.split("\n")[:-1]


def ours(setup: str, expr: str) -> tuple[list[str], list[str]]:
    """(the command's words after the override key, the notes) as verlctl reads the same lines."""
    p = parse_script(f"{setup}\n{ENTRY} trainer.experiment_name={expr}\n", "t.sh", None)
    assert p.command.argv[:3] == ENTRY.split()
    first, *others = p.command.argv[3:]
    return [first.split("=", 1)[1], *others], p.notes


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        # "${A[*]}" is one word, the elements joined by a space; "${A[@]}" one word per element
        ("A=(a b c)", '"${A[*]}"'),
        ("A=(a b c)", '"x${A[*]}y"'),
        ("A=(a b c)", '"${A[@]}"'),
        ("A=(a b c)", "${#A[*]}"),
        ("set -- p q", '"$*"'),
        ("A=()", '"${A[*]:-none}"'),
        # elements given by index, and set one at a time
        ("A=([0]=x [1]=y)", "${A[1]}"),
        ("A=([1]=x [0]=y)", "${A[0]}"),
        ("A=(a [1]=b c)", "${A[2]}"),
        ("A=(a b c)\nA[1]=Z", "${A[1]}"),
        ("A=(a b c)\nA[3]=Z", "${A[3]}"),
        ("A=(a b c)\nA[-1]=Z", "${A[2]}"),
        ("A=(a b c)\nA[1]+=Z", "${A[1]}"),
        ("A=(a b c)\ni=1\nA[i+1]=Z", "${A[2]}"),
        ("X=s\nX[0]=t", "$X"),
        ("X=s\nX[1]=t", "${X[1]}$X"),
        ("A=(a b c)\ndeclare A[1]=Q", "${A[1]}"),
        # ANSI-C quoting's numeric escapes
        ("", "$'\\x41\\101'"),
        ("", "$'\\x4a\\x4'"),
        ("", "$'a\\u00e9b'"),
        ("", "$'\\U0001F600'"),
        ("", "$'\\0101'"),
        ("", "$'\\xZ\\q\\x'"),
        # an operand quoted in full is one word even where the expansion is not quoted (a logger list, say)
        ("X=a", '${X:+"q r"}'),
        ("X=a", 'x${X:+"q r"}y'),
        ("X=a", '${X:+""}'),
        ("X=a", "${X:+'q r'}"),
        ("X=a", "${X:+q r}"),
        ("X=a", '${X:+"trainer.logger=[\'console\',\'wandb\']"}'),
        ("", '${U:-"a b"}'),
        ("", "${U:-a b}"),
        # ...but ${U:="a b"} is U's new value, split again where unquoted
        ("", '${U:="a b"} $U'),
        # the positional parameters a script sets itself
        ("set -- a b\nX=$1", "$X$#"),
        ("set -euo pipefail\nset -- a b\nset -e\nX=$2", "$X$#"),
        ("set a b c", "$3$#"),
        ("set -o pipefail -e a b", "$1$2$#"),
        ("set -x -- q", "$1"),
        ("set -o pipefail", "$#"),
    ],
)
def test_array_ansi_and_positional_expansions_read_as_bash_reads_them(setup: str, expr: str) -> None:
    words, _ = ours(setup, expr)
    assert words == bash_words(setup, expr)


@pytest.mark.parametrize(
    ("setup", "expr", "why"),
    [
        ("A=([2]=x [5]=y)", "${A[5]}", "a sparse array (indices with gaps)"),
        ("A=(a b c)\nA[7]=Z", "${A[7]}", "a sparse array (an element past the end)"),
        ("A=(a b c)\nA+=([3]=d)", "${A[3]}", "an indexed array assignment"),
    ],
)
def test_a_sparse_array_is_reported_unresolved_not_read_empty(setup: str, expr: str, why: str) -> None:
    """verlctl keeps arrays dense: an array with a gap is reported (a note naming why) and its elements stay
    marked unresolved, where they used to read as empty strings."""
    [word], notes = ours(setup, expr)
    assert word.startswith(UNRESOLVED) and word.endswith(UNRESOLVED)
    assert any(why in n for n in notes), notes
    assert bash_words(setup, expr) != [""]  # bash has a value there


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("MODEL=~/models/Qwen3-8B", "actor_rollout_ref.model.path=$MODEL"),  # a path under the home directory
        ("", "~/z"),
        ("", "~"),
        ("", "a=~"),  # an argument that looks like an assignment: after = and :
        ("", "a=b:~/c"),
        ("", "data.train_files=~/x"),  # not a shell name before the = : left as written, as bash leaves it
        ("", "x:~/y"),
        ("", '"~/q"'),
        ("", "\\~/q"),
        ("", '~"/x"'),
        ("", "x~"),
        ("Y=a:~/w:~", "$Y"),
        ('Z="~/q"', "$Z"),
        ("A=(~/a \"~/b\" c:~/d)", '"${A[@]}"'),
        ("export E=~/e", "$E"),
        ("M=/m\nX=$M:~/v", "$X"),
        ("", "${U:-~/d}"),
        ("", '"${U:-~/d}"'),  # quoted: no tilde expansion in the operand
        ("", "~$HOME"),
        ("", "--x=~/d"),
    ],
)
def test_a_tilde_is_the_home_directory_where_bash_expands_it(setup: str, expr: str) -> None:
    """``MODEL=~/models/...`` is common in launch scripts: bash hands verl the home directory's path, so the
    import must read the same (with HOME from --var HOME=...), not a literal ``~`` that no process expands."""
    home = "/home/u"
    want = subprocess.run(["bash", "-c", setup + f"\nprintf '%s\\n' {expr}"], capture_output=True, text=True,
                          check=True, env={"HOME": home, "PATH": "/usr/bin:/bin"}).stdout.split("\n")[:-1]
    p = parse_script(f"{setup}\n{ENTRY} {expr}\n", "t.sh", {"HOME": home})
    assert p.command.argv[3:] == want
    assert "HOME" not in p.unset


def test_a_tilde_without_a_known_home_is_reported_as_home_unset() -> None:
    """Without --var HOME=... the home directory is unknown: ``~`` reads as $HOME does then (empty), and HOME
    is named among the variables the script reads but never sets, so the import says which --var to pass."""
    p = parse_script(f"MODEL=~/models/Qwen3-8B\n{ENTRY} actor_rollout_ref.model.path=$MODEL\n", "t.sh", None)
    assert p.command.overrides == ["actor_rollout_ref.model.path=/models/Qwen3-8B"]
    assert p.unset == ["HOME"]


def test_an_inline_backquoted_comment_in_a_long_command_is_nothing() -> None:
    """``a=1 `# why` \\`` comments one line of a long command: bash substitutes nothing there (an unquoted
    empty word disappears), so the override list is exactly the other words."""
    text = (f"{ENTRY} \\\n  a=1 `# the first` \\\n  b=2 `#the second` \\\n  \"c=$(\n  # a comment line\n  )\"\n")
    want = subprocess.run(["bash", "-c", "python3() { printf '%s\\n' \"$@\"; }\n" + text], capture_output=True,
                          text=True, check=True).stdout.split("\n")[:-1]
    p = parse_script(text, "t.sh", None)
    assert p.command.argv[1:] == want == ["-m", "verl.trainer.main_ppo", "a=1", "b=2", "c="]
    assert not p.notes


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("N=8\nG=4", "$(( N > G ? N / G : 1 ))"),  # nodes from devices, with a floor: the common use
        ("N=8", "$(( N >= 8 && N % 2 == 0 ))"),
        ("X=3", "$(( (X & 1) == 1 ))"),
        ("", "$((1 ? 0 ? 5 : 6 : 7))"),
        ("", "$((0 ? 5 : 0 ? 6 : 7))"),
        ("", "$((0 && 1/0))"),  # the side bash does not evaluate raises nothing
        ("", "$((1 || 1/0))"),
        ("", "$((1 ? 2 : 1/0))"),
        ("", "$((0 ? 1/0 : 3))"),
        ("", "$((3 > 2 == 1))"),
        ("", "$((1 < 2 < 3))"),
        ("", "$((5 & 3 ^ 1 | 8))"),
        ("", "$((2 + 3 << 1))"),
        ("", "$((1<<64))"),  # the shift count is taken modulo 64, as on x86-64
        ("", "$((1<<-1))"),
        ("", "$((-8>>1))"),
        ("", "$((!5))$((!0 + 1))"),
        ("", "$((~5))$((~-1))"),
        ("", "$((-2**2))"),
        ("", "$((5 >= 5))$((5 <= 4))$((3 != 3 || 0))"),
        ("", "$((2#101))"),
        ("", "$((16#ff))"),
        ("", "$((36#Z))"),  # up to base 36 letters are either case
        ("", "$((62#Z))"),
        ("", "$((64#_))$((64#@))"),
    ],
)
def test_arithmetic_operators_read_as_bash_reads_them(setup: str, expr: str) -> None:
    """Comparisons, logic, bit operators, shifts, ?: and BASE#N in $((...)): they used to be left unresolved."""
    words, notes = ours(setup, expr)
    assert words == bash_words(setup, expr)
    assert not notes


@pytest.mark.parametrize("expr", ["$((1 ? 2))", "$((65#1))", "$((2#12))", "$((1/0))", "$((X+=2))"])
def test_an_arithmetic_error_or_an_assignment_is_reported_unresolved(expr: str) -> None:
    [word], notes = ours("X=3", expr)
    assert word.startswith(UNRESOLVED) and any("arithmetic" in n for n in notes), notes


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        # the model's name from its path and similar: common in experiment names and directories
        ("M=/models/Qwen/Qwen3-8B", "${M##*/}"),
        ("M=/models/Qwen/Qwen3-8B/", "${M%/}"),
        ("M=/models/Qwen/Qwen3-8B", "${M%/*}"),
        ("M=Qwen3-8B", "${M,,}-${M//-/_}"),
        ("F=train.parquet", "${F%.parquet}"),
        ("F=train.parquet", "${F%.*}"),
        ("F=a.tar.gz", "${F%%.*}"),
        ("P=a/b/c", "${P//\\//_}"),
        ("X=abcabc", "${X#a}"),
        ("X=abcabc", "${X#*b}"),
        ("X=abcabc", "${X##*b}"),
        ("X=abcabc", "${X%b*}"),
        ("X=abcabc", "${X%%b*}"),
        ("X=abcabc", "${X/b/Z}"),
        ("X=abcabc", "${X//b/Z}"),
        ("X=abcabc", "${X/#a/Z}"),
        ("X=abcabc", "${X/%c/Z}"),
        ("X=abcabc", "${X/b}"),
        ("X=abcabc", "${X//[ab]/-}"),
        ("X=abcabc", "${X//[!ab]/-}"),
        ("X=abcabc", "${X//?/.}"),
        ("X=abcabc", "${X/*/Z}"),
        ("X=abcabc", "${X//b*/Z}"),
        ("X=abcabc", "${X/x/Z}"),
        ("X=aaa", "${X//a/bb}"),
        ("X=abc", "${X#}x${X//}"),
        ("F=run12", "${F%[0-9]}"),  # classes and ranges, also read backwards for a suffix
        ("F=run12", "${F%%[0-9]*}"),
        ("F=run12", "${F##*[a-z]}"),
        ("F=run12", "${F//[!0-9]/}x"),
        ("F=run12", "${F//[^a-m]/_}"),
        ("F=a-b", "${F//[-]/+}"),
        ("F=a]b", "${F//[]]/+}"),
        ("F=ab", "${F/[/x}"),
        ("F=aXbXc", "${F%X*}"),
        ("F=aXbXc", "${F#*X}"),
        ("F=aXbXc", "${F/X*X/-}"),
        ("F=abc", "${F/#*/-}${F/%*/-}${F/#b/-}${F/%b/-}${F/#?/-}${F/%?/-}"),
        ("F=aaaa", "${F//a*a/-}"),
        ("F=abab", "${F//b/}"),
        # what is quoted or escaped in a pattern matches literally
        ("X=a*b", "${X/\\*/S}"),
        ("X=a*b", "${X/'*'/S}"),
        ("Q='*'\nX=a*b", '${X/"$Q"/S}'),
        ("Q='*'\nX=a*b", "${X/$Q/S}"),
        ("X=a[b", "${X/\\[/S}"),
        # substrings and array slices
        ("X=abcabc", "${X:2}"),
        ("X=abcabc", "${X:1:3}"),
        ("X=abcabc", "${X: -2}"),
        ("X=abcabc", "${X:(-3):2}"),
        ("X=abcabc", "${X:1:-1}"),
        ("X=abcabc", "x${X:10}${X:0:0}${X: -10}"),
        ("N=2\nX=abcdef", "${X:N:N+1}"),
        ("A=(x.a y.a)", '"${A[@]%.a}"'),
        ("A=(a b c)", "${A[@]:1:1}"),
        ("A=(a b c)", '"${A[@]:1}"'),
        ("A=(a b c)", '"${A[@]: -1}"'),
    ],
)
def test_pattern_and_substring_expansions_read_as_bash_reads_them(setup: str, expr: str) -> None:
    """``${M##*/}`` and friends used to be left unresolved: the experiment name of many scripts."""
    words, notes = ours(setup, expr)
    assert words == bash_words(setup, expr)
    assert not notes


def test_a_substring_whose_end_is_before_its_start_is_reported_unresolved() -> None:
    [word], notes = ours("X=abc", "${X:2:-2}")
    assert word.startswith(UNRESOLVED) and any("substring expression < 0" in n for n in notes), notes


def test_a_pattern_over_a_long_value_is_read_and_one_too_long_is_reported() -> None:
    """The glob is matched without backtracking (a star-heavy pattern over 500 characters is one pass per
    start); a value above the bound (MAX_PATTERN_VALUE) is reported unresolved instead of worked through."""
    from verlctl.inputs.shell_script import MAX_PATTERN_VALUE

    v = "a" * (MAX_PATTERN_VALUE - 12)
    setup = f"X={v}"
    for expr in ("${X//*a*a*a*a*b/Z}", "${X%%*a*a*a*b}", "${X//a*a*a*a*b/Z}", "${X##*a*a}x"):
        words, notes = ours(setup, expr)
        assert words == bash_words(setup, expr) and not notes
    [word], notes = ours(f"X={'a' * (MAX_PATTERN_VALUE + 1)}", "${X//a/b}")
    assert word.startswith(UNRESOLVED) and any("for a pattern" in n for n in notes)


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ('X=3\nif [ "$X" -gt 2 ]; then Y=big; else Y=small; fi', "$Y"),
        ('X=3\nif [ "$X" -lt 2 ]; then Y=big; elif [ "$X" = 3 ]; then Y=three; else Y=small; fi', "$Y"),
        ('X=\nif [ -z "$X" ]; then Y=empty; fi', "$Y"),
        ('X=a\nif [ -n "$X" ]; then Y=set; fi', "$Y"),
        ("X=a\nif [[ -z $X ]]; then Y=empty; else Y=full; fi", "$Y"),
        ('X=a\nif [ "$X" ]; then Y=nonempty; fi', "$Y"),
        ('X=\nif [ "$X" ]; then Y=nonempty; else Y=empty; fi', "$Y"),
        ('X=npu\nif [ "$X" == "npu" ]; then Y=ascend; else Y=cuda; fi', "$Y"),  # the device switch of scripts
        ('X=gpu\nif [ "$X" != "npu" ]; then Y=cuda; fi', "$Y"),
        ('X=a*\nif [ "$X" = "a*" ]; then Y=lit; else Y=no; fi', "$Y"),  # [ ] compares literally
        ("N=8\nif [[ $N -ge 8 ]]; then Y=many; fi", "$Y"),
        ("N=8\nif [ $N -eq 8 ]; then Y=eight; fi", "$Y"),
        ("N=8\nif [ $N -ne 8 ]; then Y=no; else Y=yes; fi", "$Y"),
        ("N=-2\nif [ $N -le -2 ]; then Y=neg; fi", "$Y"),
        ('X="a b"\nif [[ $X == "a b" ]]; then Y=1; else Y=2; fi', "$Y"),
        ('X=${X:-7}\nif [ "$X" -gt 5 ]; then Y=gt; fi', "$Y"),
    ],
)
def test_an_if_on_the_scripts_own_values_takes_the_branch_bash_takes(setup: str, expr: str) -> None:
    words, notes = ours(setup, expr)
    assert words == bash_words(setup, expr)
    assert any("`if` evaluated" in n for n in notes), notes


@pytest.mark.parametrize(
    "setup",
    [
        'if [ "$FROM_ENV" = 1 ]; then Y=a; else Y=b; fi',  # the run's environment decides: not known here
        'X="a b"\nif [ $X = "a b" ]; then Y=a; else Y=b; fi',  # [ ] splits $X into two words
        'X=a\nif [[ $X == a* ]]; then Y=a; else Y=b; fi',  # a glob on the right of [[ ]]
        "N=x\nif [ $N -gt 1 ]; then Y=a; else Y=b; fi",  # not an integer
        "if [ -f /etc/hosts ]; then Y=a; else Y=b; fi",  # a file test
    ],
)
def test_an_if_that_needs_more_than_the_scripts_values_is_refused_where_the_command_uses_its_value(setup: str) -> None:
    """Not evaluated, the block may set Y: a command that reads Y is refused, naming Y and the block (it used to
    read the value as if no branch ran); a command that does not read it is imported with the block reported."""
    with pytest.raises(ScriptError, match=r"uses Y, which the `if` block at lines \d+-\d+ may set"):
        ours(setup, "${Y:-unread}")
    words, notes = ours(setup, "kept")
    assert words == ["kept"]
    assert any("'if' block not evaluated" in n for n in notes), notes


@pytest.mark.parametrize("expr", ["${X[fi@]}", "${X[[]}", "${A[x+]}"])
def test_an_array_index_that_does_not_evaluate_is_reported_not_a_traceback(expr: str) -> None:
    """A fuzzed script found ``${X[fi@]}`` raising a ValueError out of the import (a traceback)."""
    [word], notes = ours("X=abc\nA=(x y)", expr)
    assert word.startswith(UNRESOLVED) and any("unsupported array index" in n for n in notes), notes


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("declare -a A=(x y)", "${A[1]}"),  # was refused: "unexpected '(' in a command"
        ("local -a L=(p q)", "${L[0]}"),
        ("export -a E=(p q)", "${E[0]}"),
        ("readonly R=(p q)", "${R[1]}"),
        ("declare -ax X=(1 2)", "${X[1]}"),
        ("declare -a A=(x y)\nA+=(z)", "${A[2]}"),
    ],
)
def test_an_array_declared_with_its_elements_is_read(setup: str, expr: str) -> None:
    words, _ = ours(setup, expr)
    assert words == bash_words(setup, expr)


@pytest.mark.parametrize("setup", ["declare -A M=([a]=1 [b]=2)", "declare -A M\nM[a]=1\nM[b]=2",
                                   "typeset -A M\nM=([b]=2)"])
def test_an_associative_array_is_reported_unresolved_not_read_by_position(setup: str) -> None:
    """verlctl's arrays are indexed: ``M[a]`` and ``M[b]`` of a ``declare -A`` are not elements 0 and 0."""
    [word], notes = ours(setup, "${M[b]}")
    assert word.startswith(UNRESOLVED) and any("an associative array" in n for n in notes), notes
    assert bash_words(setup, "${M[b]}") == ["2"]
