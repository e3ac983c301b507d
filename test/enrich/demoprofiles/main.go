// SPDX-License-Identifier: Apache-2.0

// Command demoprofiles shows ctx_enrich at work without a profiler: it
// watches the threads of `make run`'s demo publisher (threadpub --demo),
// takes a sample of each thread found running (state R in
// /proc/PID/task/TID/stat) every few milliseconds, as a CPU profiler would,
// and sends them as one OTLP profile shaped like the OTel eBPF profiler's
// (docs/profiles.md: process.pid on the resource, thread.id and a timestamp
// per sample, no link) to the collector's OTLP/HTTP endpoint. With
// config/otelctx.yaml the debug exporter prints the profile with the demo's
// published service.name and, on each sample, the thread's span attributes
// (http.route, http.request.method); _build/profiles.jsonl gets the same
// profile with each sample's link to the span its thread had.
//
//	make demo-profiles          (while `make run` runs, as root)
//	go run ./test/enrich/demoprofiles -pid PID -duration 3s -endpoint 127.0.0.1:4318
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

func main() {
	pid := flag.Int("pid", 0, "the demo publisher's pid (default: the running threadpub --demo)")
	duration := flag.Duration("duration", 3*time.Second, "how long to sample")
	every := flag.Duration("every", 5*time.Millisecond, "sampling period")
	endpoint := flag.String("endpoint", "127.0.0.1:4318", "the collector's OTLP/HTTP endpoint")
	flag.Parse()
	if err := run(*pid, *duration, *every, *endpoint); err != nil {
		fmt.Fprintln(os.Stderr, "demoprofiles:", err)
		os.Exit(1)
	}
}

func run(pid int, duration, every time.Duration, endpoint string) error {
	if pid == 0 {
		var err error
		if pid, err = findDemo(); err != nil {
			return err
		}
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	type sample struct {
		tid int
		at  time.Time
	}
	var samples []sample
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(duration); time.Now().Before(end); <-tick.C {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			if tid != pid && running(pid, tid) {
				samples = append(samples, sample{tid, time.Now()})
			}
		}
	}
	if len(samples) == 0 {
		return fmt.Errorf("pid %d: no thread was seen running in %v", pid, duration)
	}

	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	strs := dict.StringTable()
	strs.Append("", "thread.id", "samples", "count", "cpu", "nanoseconds")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	attrOf := map[int]int32{}
	rp := pd.ResourceProfiles().AppendEmpty()
	res := rp.Resource().Attributes()
	res.PutInt("process.pid", int64(pid))
	res.PutStr("process.executable.path", exe)
	res.PutStr("process.executable.name", filepath.Base(exe))
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(2)
	prof.SampleType().SetUnitStrindex(3)
	prof.PeriodType().SetTypeStrindex(4)
	prof.PeriodType().SetUnitStrindex(5)
	prof.SetPeriod(every.Nanoseconds())
	prof.SetTime(pcommon.NewTimestampFromTime(samples[0].at))
	prof.SetDurationNano(uint64(samples[len(samples)-1].at.Sub(samples[0].at)))
	for _, s := range samples {
		idx, ok := attrOf[s.tid]
		if !ok {
			a := dict.AttributeTable().AppendEmpty()
			a.SetKeyStrindex(1)
			a.Value().SetInt(int64(s.tid))
			idx = int32(dict.AttributeTable().Len() - 1)
			attrOf[s.tid] = idx
		}
		ps := prof.Samples().AppendEmpty()
		ps.AttributeIndices().Append(idx)
		ps.TimestampsUnixNano().Append(uint64(s.at.UnixNano()))
	}
	// ProfilesData and ExportProfilesServiceRequest share their fields: the
	// marshalled data is the request body.
	var m pprofile.ProtoMarshaler
	body, err := m.MarshalProfiles(pd)
	if err != nil {
		return err
	}
	url := "http://" + endpoint + "/v1development/profiles"
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(url, "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w (is `make run` running?)", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %q (profiles need --feature-gates=service.profilesSupport)", url, resp.Status, msg)
	}
	fmt.Printf("demoprofiles: sent %d samples of pid %d (%d threads seen running over %v) to %s; make run's collector prints them (debug exporter) and writes them with their links to _build/profiles.jsonl\n",
		len(samples), pid, len(attrOf), duration, url)
	return nil
}

// running reports whether the thread is on a CPU or runnable (state R).
func running(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // comm may contain spaces and parentheses
	return i >= 0 && i+2 < len(b) && b[i+2] == 'R'
}

// findDemo finds the newest process running threadpub --demo.
func findDemo() (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	best := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "threadpub" && args[1] == "--demo" && pid > best {
			best = pid
		}
	}
	if best == 0 {
		return 0, errors.New("no threadpub --demo process (start `make run` first, or pass -pid)")
	}
	return best, nil
}
