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
		case "pass", "fail", "skip":
			if sub == "" {
				r.Action = ev.Action
			} else if ev.Action == "fail" {
				r.Failed = append(r.Failed, sub)
			}
		}
	}
	return order, outside, nil
}

// Summary is one line of figures for a VM run.
func (b *Boot) Summary(results map[string][]*TestResult) string {
	var n, pass, fail, skip int
	var secs float64
	for _, ro := range b.Runs {
		secs += ro.Seconds
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
	return fmt.Sprintf("%s: boot %v, tests %.1fs, total %v; %d tests: %d passed, %d failed, %d skipped",
		b.Kernel, b.BootDur.Round(100*time.Millisecond), secs, b.Total.Round(100*time.Millisecond), n, pass, fail, skip)
}
