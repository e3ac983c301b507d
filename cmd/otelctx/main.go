// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command otelctx is the debugging CLI of the process-context reader: it
// shows which processes on this host publish an OpenTelemetry process
// context (OTEP 4719) and what they publish.
//
// Each subcommand lives in its own file and registers itself with register
// in an init function; this file holds the dispatch, the flags every
// subcommand shares, usage and the error-to-exit-code policy.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/scan"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (no context, unreadable, …)
	exitUsage = 2 // bad command line
)

// runFunc runs a subcommand with its positional arguments.
type runFunc func(e *env, args []string) error

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments for the usage line, e.g. "PID"
	summary string // one line for the command list
	help    string // paragraph for "otelctx help NAME"
	// setup defines the command's own flags on fs and returns the function
	// that runs it (which reads the flag values it bound).
	setup func(fs *flag.FlagSet) runFunc
}

var commands = map[string]*command{}

// register adds a subcommand; called from the init function of its file.
func register(c *command) {
	if _, dup := commands[c.name]; dup || c.name == "help" {
		panic("otelctx: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// common are the flags every subcommand accepts, before or after its name.
type common struct {
	proc       string
	maxPayload uint64
	verbose    bool
}

func defaultCommon() common {
	return common{proc: "/proc", maxPayload: processctx.DefaultMaxPayloadSize}
}

// define adds the common flags to fs, with the current values as defaults,
// so that "otelctx -v dump" and "otelctx dump -v" set the same thing.
func (c *common) define(fs *flag.FlagSet) {
	fs.StringVar(&c.proc, "proc", c.proc, "procfs `root`")
	fs.Uint64Var(&c.maxPayload, "max-payload-size", c.maxPayload, "refuse process contexts whose payload_size exceeds this many `bytes`")
	fs.BoolVar(&c.verbose, "v", c.verbose, "print the readers' debug logs on stderr")
}

func (c *common) validate() error {
	if c.maxPayload == 0 || c.maxPayload > math.MaxUint32 {
		return usageErrorf("--max-payload-size must be between 1 and %d", uint64(math.MaxUint32))
	}
	return nil
}

// env is what a running subcommand gets.
type env struct {
	stdout, stderr io.Writer
	common
	log *zap.Logger
}

// newScanner returns a scanner configured from the common flags.
func (e *env) newScanner() (*scan.Scanner, error) {
	s, err := scan.New(scan.Options{
		ProcRoot: e.proc,
		Limits:   e.limits(),
		Logger:   e.log,
	})
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", e.proc, err)
	}
	return s, nil
}

// limits bound the reads of a process context: the defaults, but the
// payload size of --max-payload-size.
func (e *env) limits() processctx.Limits {
	l := processctx.DefaultLimits()
	l.MaxPayloadSize = uint32(e.maxPayload)
	return l
}

// usageError is a bad command line: exit 2 with a usage line.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if versionRequested(args) {
		printVersion(stdout)
		return exitOK
	}
	e := &env{stdout: stdout, stderr: stderr, common: defaultCommon()}
	top := flag.NewFlagSet("otelctx", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	e.common.define(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return exitOK
		}
		return failUsage(stderr, nil, err)
	}
	args = top.Args()
	if len(args) == 0 {
		fmt.Fprintln(stderr, "otelctx: no command given")
		printUsage(stderr)
		return exitUsage
	}
	name, args := args[0], args[1:]
	if name == "help" {
		return runHelp(args, stdout, stderr)
	}
	cmd, ok := commands[name]
	if !ok {
		return failUsage(stderr, nil, usageErrorf("unknown command %q", name))
	}

	fs := flag.NewFlagSet("otelctx "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.common.define(fs)
	runCmd := cmd.setup(fs)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printCommandUsage(stdout, cmd)
		return exitOK
	}
	if err == nil {
		err = e.common.validate()
	}
	if err != nil {
		return failUsage(stderr, cmd, err)
	}

	e.log = zap.NewNop()
	if e.verbose {
		e.log = newDebugLogger(stderr)
	}
	defer func() { _ = e.log.Sync() }()

	err = runCmd(e, pos)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return failUsage(stderr, cmd, err)
	default:
		fmt.Fprintf(stderr, "otelctx: %s\n", oneLine(err.Error()))
		return exitFail
	}
}

// parseInterspersed parses flags anywhere among the positional arguments
// ("otelctx dump 1234 --json"); everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newDebugLogger is zap's development logger, writing to w.
func newDebugLogger(w io.Writer) *zap.Logger {
	core := zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(w),
		zapcore.DebugLevel,
	)
	return zap.New(core, zap.Development())
}

func failUsage(stderr io.Writer, cmd *command, err error) int {
	prefix := "otelctx"
	if cmd != nil {
		prefix += " " + cmd.name
	}
	fmt.Fprintf(stderr, "%s: %s\n", prefix, oneLine(err.Error()))
	if cmd != nil {
		fmt.Fprintf(stderr, "usage: %s (see: otelctx help %s)\n", usageLine(cmd), cmd.name)
	} else {
		fmt.Fprintln(stderr, "usage: otelctx [flags] <command> [flags] [args] (see: otelctx help)")
	}
	return exitUsage
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		printUsage(stdout)
		return exitOK
	case len(args) > 1:
		return failUsage(stderr, nil, usageErrorf("help takes at most one command"))
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return failUsage(stderr, nil, usageErrorf("unknown command %q", args[0]))
	}
	printCommandUsage(stdout, cmd)
	return exitOK
}

func usageLine(cmd *command) string {
	s := "otelctx " + cmd.name + " [flags]"
	if cmd.args != "" {
		s += " " + cmd.args
	}
	return s
}

func sortedCommands() []*command {
	out := make([]*command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `otelctx shows the OpenTelemetry process contexts (OTEP 4719) published by
processes on this host.

usage: otelctx [flags] <command> [flags] [args]
       otelctx --version

commands:
`)
	for _, c := range sortedCommands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "print this help, or a command's: otelctx help <command>")
	fmt.Fprint(w, "\nflags of every command (before or after its name):\n")
	fs := flag.NewFlagSet("otelctx", flag.ContinueOnError)
	c := defaultCommon()
	c.define(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nReading another user's process needs root (or CAP_SYS_PTRACE).\n")
}

func printCommandUsage(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n\nflags:\n", usageLine(cmd), strings.TrimSpace(cmd.help))
	fs := flag.NewFlagSet("otelctx "+cmd.name, flag.ContinueOnError)
	c := defaultCommon()
	c.define(fs)
	cmd.setup(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parsePID parses a positional PID argument.
func parsePID(s string) (int, error) {
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return 0, usageErrorf("invalid PID %q", s)
	}
	return pid, nil
}

// pidError turns a failure to read pid's process context into the one-line
// reason the user sees.
func (e *env) pidError(pid int, err error) error {
	var reason string
	switch r := scan.ReasonOf(err); {
	case (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EINVAL)) && r == scan.ReasonOther:
		// pidfd_open refuses a thread ID that is not its process's.
		if tgid, ok := threadGroup(e.proc, pid); ok && tgid != pid {
			reason = fmt.Sprintf("a thread of process %d, not a process (try: otelctx dump %d)", tgid, tgid)
			break
		}
		reason = fmt.Sprintf("cannot read process context: %v", err)
	case errors.Is(err, syscall.ESRCH) || r == scan.ReasonProcessGone:
		reason = "no such process"
	case errors.Is(err, scan.ErrNoContext):
		reason = "no process context"
	case r == scan.ReasonPermission && os.Geteuid() != 0:
		reason = "permission denied (reading another user's process needs root or CAP_SYS_PTRACE)"
	case r == scan.ReasonPermission:
		reason = fmt.Sprintf("permission denied (%v)", err)
	case r == scan.ReasonConcurrentUpdate:
		reason = "process context kept changing while being read (concurrent_update); try again"
	case r == scan.ReasonInvalidHeader || r == scan.ReasonPayloadSize ||
		r == scan.ReasonMalformedPayload || r == scan.ReasonBadAddress:
		reason = fmt.Sprintf("process context invalid: %s (%v)", r, err)
	default:
		reason = fmt.Sprintf("cannot read process context: %v", err)
	}
	return fmt.Errorf("pid %d: %s", pid, reason)
}

// threadGroup returns the process (thread group) of thread id from
// <procRoot>/<id>/status: /proc resolves thread IDs it does not list.
func threadGroup(procRoot string, id int) (int, bool) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(id) + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			tgid, err := strconv.Atoi(strings.TrimSpace(v))
			return tgid, err == nil
		}
	}
	return 0, false
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
