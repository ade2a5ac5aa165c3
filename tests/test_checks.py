"""aoti.check end to end: real compiles in inner pytest sessions, each program compiled once
for the whole suite through the shared artifact cache."""

from __future__ import annotations


def test_input_mutation_values_and_names(run_aoti):
    result = run_aoti(
        """
        def test_right(aoti):
            x = example()
            aoti.check(DoubleThenCos(), (x,), mutates={"x": example() * 2})
            assert torch.equal(x, example())

        def test_right_after_calls(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 8}, calls=3)

        def test_expected_as_function_of_inputs(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"x": lambda x: x * 2})

        def test_wrong_value(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 3})

        def test_wrong_name(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"y": example() * 2})

        def test_claims_no_mutation(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={})

        def test_signature_maps(aoti):
            program = aoti.compile(DoubleThenCos(), (example(),))
            assert program.mutated_inputs == {"x"}
            assert program.mutated_buffers == set()
            assert program.signature.output_kinds == ("USER_INPUT_MUTATION", "USER_OUTPUT")
        """
    )
    result.assert_outcomes(passed=4, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_wrong_value*",
            "E * input 'x' holds the wrong value after the AOTI engine ran (after 1 call)*",
            "*test_wrong_name*",
            "E * mutated inputs differ: expected {'y'}, the program mutates {'x'}",
            "E * inputs of the program: x",
            "*test_claims_no_mutation*",
            "E * mutated inputs differ: expected none, the program mutates {'x'}",
        ]
    )
    result.stdout.fnmatch_lines(["aoti: 1 program; * compiled in *; * loaded from cache in *"])


def test_wrong_engine_output_is_reported_with_figures(run_aoti):
    result = run_aoti(
        """
        def test_off(aoti):
            aoti.check(OffWhenCompiled(), (example(),))
        """
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "    def test_off(aoti):",
            ">       aoti.check(OffWhenCompiled(), (example(),))",
            "E * output differs between eager and the AOTI engine: 1 of 6 elements beyond *",
            "E *shape*",
            "E *worst at index (1, 0): eager=9 engine=9.5",
        ]
    )
    # the user's own line is what pytest shows, not the plugin's internals
    assert "pytest_aoti/runs.py" not in result.stdout.str()


def test_nan_and_nested_outputs(run_aoti):
    result = run_aoti(
        """
        def test_nested_outputs_with_nan_on_both_sides(aoti):
            result = aoti.check(Nested(), (example(), example() * 2))
            assert set(result.max_errors) >= {"output['sum']", "output['rest'][0]"}

        def test_nan_on_one_side(aoti):
            aoti.check(NanWhenCompiled(), (example() - 2,))
        """
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["E * output differs *: 1 of 6 elements are NaN on one side only, first at index (1, 1)*"]
    )


def test_write_lost_by_export_is_caught(run_aoti):
    result = run_aoti(
        """
        def test_lost(aoti):
            aoti.check(LosesWrite(), (example(), example()))
        """
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * input 'x' differs between eager and the AOTI engine*"])


def test_buffer_state_across_calls(run_aoti):
    result = run_aoti(
        """
        def test_first_call(aoti):
            with pytest.warns(AotiBufferMutationWarning, match="counter.*not thread-safe"):
                aoti.check(Counter(), (example(),), mutated_buffers={"counter"}, mutates={})

        def test_wrong_buffer_set(aoti):
            aoti.check(Counter(), (example(),), mutated_buffers={"count"})

        def test_three_calls(aoti):
            aoti.check(Counter(), (example(),), calls=3)

        def test_fresh_engine_per_check(aoti):
            # a check never inherits buffer state from an earlier engine: the first call
            # of every check sees the module's own counter
            for _ in range(2):
                aoti.check(Counter(), (example(),))
        """,
        "-W",
        "ignore::pytest_aoti.AotiBufferMutationWarning",
    )
    # pytorch/pytorch#165444: the engine does not carry the buffer's value to call 2
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * mutated buffers differ: expected {'count'}, the program mutates {'counter'}",
            "E * output differs between eager and the AOTI engine (call 2 of 3)*",
        ]
    )


def test_samples_share_one_program(run_aoti):
    result = run_aoti(
        """
        from torch.export import Dim

        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * 2 + x.sum(dim=0)

        def test_samples(aoti):
            result = aoti.check(
                Scale(),
                (torch.ones(4, 3),),
                dynamic_shapes=({0: Dim("batch", min=2, max=32)},),
                samples=[(torch.ones(7, 3),), (torch.ones(2, 3),)],
                examples=0,
            )
            assert {context for context, _ in result.stats} == {"sample 0", "sample 1", "sample 2"}
        """
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: 1 program; *"])
