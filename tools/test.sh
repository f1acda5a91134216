#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite, from a fresh Debian machine (as root): installs what
# is needed, builds with gcc (warnings as errors) and runs every unit and
# integration test, the compute unit tests again under valgrind, the fuzz
# targets' saved inputs (clang, libFuzzer), then everything again built with
# ASan+UBSan -- except, by default, the integration tests of suite 'long'
# (the slowest ones; they ran in the first build): `tools/test.sh --long`
# (or TEST_LONG=1) runs those under the sanitizers too. Prints one closing
# line "N passed, N failed" and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

for arg in "$@"; do
	case $arg in
	--long) TEST_LONG=1 ;;
	*) echo "usage: tools/test.sh [--long]" >&2; exit 2 ;;
	esac
done
t_start=$(date +%s)

bash tools/install-deps.sh || { echo "test.sh: installing dependencies failed" >&2; exit 1; }

# Three tests at a time on two cores: most integration tests wait (on
# timeouts, peers, radosgw behind its delaying proxy); two at a time left the
# cores idle half of the time. Under valgrind, which only computes, two.
TEST_PROCS=${TEST_PROCS:-3}
VALGRIND_PROCS=${VALGRIND_PROCS:-2}
phase() { echo "== $* (at $(($(date +%s) - t_start)) s)"; }
total_pass=0
total_fail=0
status=0

run_build() { # name, meson options...
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
	else
		meson configure "$dir" "$@" >/dev/null || return 1
	fi
	ninja -C "$dir" || return 1
	# TEST_PROCS at a time; of the integration tests only those that mostly
	# wait run side by side (tests/integration/meson.build,
	# integration_side_by_side), the others alone (is_parallel: false).
	meson test -C "$dir" --print-errorlogs --num-processes "$TEST_PROCS" ${TEST_ARGS:-} ${SUITE_ARGS:-}
}

count_results() { # meson's JSON test log
	local log=$1
	[ -f "$log" ] || return 0
	local p f
	p=$(grep -c '"result": "OK"' "$log" || true)
	f=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS|SKIP)"' "$log" || true)
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
}

phase "build: gcc, warnings as errors"
run_build build-ci -Dwerror=true -Dbuildtype=debugoptimized || status=1
count_results build-ci/meson-logs/testlog.json

if [ "${SKIP_VALGRIND:-0}" != 1 ]; then
	# remote/ and fsstat drive network timeouts and child processes; they run
	# under ASan below instead.
	phase "unit tests under valgrind"
	# libjpeg-turbo's SIMD code trips memcheck on padding columns it never
	# returns; the C paths compute the same bytes.
	JSIMD_FORCENONE=1 meson test -C build-ci --suite unit --no-suite remote --no-suite fsstat \
		--print-errorlogs --num-processes "$VALGRIND_PROCS" \
		--wrapper 'valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --trace-children=yes --trace-children-skip=*python*' \
		--timeout-multiplier 10 || status=1
	count_results build-ci/meson-logs/testlog-valgrind.json
fi

if [ "${SKIP_FUZZ_BUILD:-0}" != 1 ]; then
	# The libFuzzer targets are built with clang so that they cannot rot;
	# each replays its saved inputs once (the parsers' own tests replay
	# them in every build too).
	phase "build: clang, libFuzzer targets"
	fuzz_ok=1
	if [ ! -f build-fuzz/build.ninja ]; then
		CC=clang meson setup build-fuzz -Dfuzz=true -Dbuildtype=debug >build-fuzz.setup.log 2>&1 ||
			{ cat build-fuzz.setup.log; fuzz_ok=0; }
	fi
	if [ "$fuzz_ok" = 1 ] && ninja -C build-fuzz tests/fuzz/fuzz_prep tests/fuzz/fuzz_remote tests/fuzz/fuzz_s3; then
		for t in prep remote s3; do
			if build-fuzz/tests/fuzz/fuzz_$t -runs=0 tests/fuzz/corpus_$t >build-fuzz/fuzz_$t.log 2>&1; then
				echo "fuzz_$t: corpus replayed: OK"
				total_pass=$((total_pass + 1))
			else
				tail -n 20 build-fuzz/fuzz_$t.log
				echo "fuzz_$t: FAIL"
				total_fail=$((total_fail + 1))
			fi
		done
	else
		echo "fuzz build: FAIL"
		total_fail=$((total_fail + 1))
	fi
fi

if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
	phase "build: AddressSanitizer + UndefinedBehaviorSanitizer"
	# Daemons detach from the terminal: their reports go to files, and any
	# report fails the run.
	san_logs=$PWD/build-asan-logs
	rm -rf "$san_logs"
	mkdir -p "$san_logs"
	san_suites=
	if [ "${TEST_LONG:-0}" != 1 ]; then
		san_suites="--no-suite long"
		echo "(suite 'long' ran in the gcc build; under the sanitizers only with --long)"
	fi
	SUITE_ARGS=$san_suites \
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:log_path=$san_logs/asan} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:log_path=$san_logs/ubsan} \
		run_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug || status=1
	count_results build-asan/meson-logs/testlog.json
	if [ -n "$(ls -A "$san_logs")" ]; then
		echo "sanitizer reports:"
		head -n 60 "$san_logs"/*
		total_fail=$((total_fail + 1))
	fi
fi

[ "$total_fail" -gt 0 ] && status=1
echo "test.sh: ${total_pass} passed, ${total_fail} failed in $(($(date +%s) - t_start)) s"
echo "${total_pass} passed, ${total_fail} failed"
exit $status
