// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// TestResult is one top-level test of a guest test binary, from its
// test2json events.
type TestResult struct {
	Name    string
	Action  string // pass, fail, skip; "" when it never finished
	Elapsed float64
	Output  []string // its own and its subtests'
	Failed  []string // failed subtests

	benchDone bool // a benchmark printed its result
}

// resultLine: test2json leaves Elapsed out of framed (-test.v=test2json)
// output; the result line has it.
var resultLine = regexp.MustCompile(`^--- (?:PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// Results converts a run's output (-test.v=test2json) with go tool test2json
// and groups it by top-level test, in the order they started. Output
// outside any test (a panic in TestMain, the final FAIL) comes back as the
// second value.
func Results(ro *RunOutput) ([]*TestResult, []string, error) {
	cmd := exec.Command("go", "tool", "test2json")
	cmd.Stdin = strings.NewReader(strings.Join(ro.Lines, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go tool test2json: %v", err)
	}
	byName := map[string]*TestResult{}
	var order []*TestResult
	var outside []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			return nil, nil, err
		}
		if ev.Test == "" {
			if ev.Action == "output" {
				outside = append(outside, strings.TrimRight(ev.Output, "\n"))
			}
			continue
		}
		top, sub, _ := strings.Cut(ev.Test, "/")
		r := byName[top]
		if r == nil {
			r = &TestResult{Name: top}
			byName[top] = r
			order = append(order, r)
		}
		switch ev.Action {
		case "output":
			line := strings.TrimRight(ev.Output, "\n")
			r.Output = append(r.Output, line)
			if m := resultLine.FindStringSubmatch(line); m != nil && m[1] == top {
				r.Elapsed, _ = strconv.ParseFloat(m[2], 64)
			}
			// test2json has no pass event for a benchmark: its result line.
			if benchResult.MatchString(line) {
				r.benchDone = true
			}
		case "pass", "fail", "skip":
			if sub == "" {
				r.Action = ev.Action
			} else if ev.Action == "fail" {
				r.Failed = append(r.Failed, sub)
			}
		}
	}
	for _, r := range order {
		if r.Action == "" && r.benchDone && len(r.Failed) == 0 {
			r.Action = "pass"
		}
	}
	return order, outside, nil
}

// benchResult: a benchmark's (or sub-benchmark's) result line.
var benchResult = regexp.MustCompile(`^Benchmark\S+\s+\d+\s+[0-9.]+ ns/op`)

// Summary is one line of figures for a VM run.
func (b *Boot) Summary(results map[string][]*TestResult) string {
	var n, pass, fail, skip int
	var secs float64
	var scales []string
	for _, ro := range b.Runs {
		secs += ro.Seconds
		scales = append(scales, fmt.Sprintf("%s x%.1f (%d ms)", ro.Name, ro.Scale, ro.CalibrationMs))
		for _, r := range results[ro.Name] {
			n++
			switch r.Action {
			case "pass":
				pass++
			case "skip":
				skip++
			default:
				fail++
			}
		}
	}
	return fmt.Sprintf("%s: boot %v, tests %.1fs, total %v; %d tests: %d passed, %d failed, %d skipped; time scale (guest speed against an unloaded host) %s",
		b.Kernel, b.BootDur.Round(100*time.Millisecond), secs, b.Total.Round(100*time.Millisecond), n, pass, fail, skip, strings.Join(scales, ", "))
}
