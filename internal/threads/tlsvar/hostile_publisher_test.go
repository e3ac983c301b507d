// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// mapper exports the variable and maps the file it is given, as a hostile
// publisher does (offset 0, read-only), then waits.
const mapperSource = `// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
__thread void *otel_thread_ctx_v1;
int main(int argc, char **argv) {
	struct stat st;
	int fd = open(argv[1], O_RDONLY);
	if (fd < 0 || fstat(fd, &st) != 0) return 1;
	if (mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 1;
	otel_thread_ctx_v1 = 0;
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}
`

// TestHostilePublisher: a real process maps a 6 MB file whose 65,000
// section and 10,000 symbol names are one 1 MiB string (debug/elf would
// have allocated 70 GiB for them). Its variable resolves, and the whole
// resolution allocates less than its ceiling.
func TestHostilePublisher(t *testing.T) {
	gcc := testenv.RequireTool(t, "gcc")
	dir := t.TempDir()
	src, exe, hostile := filepath.Join(dir, "mapper.c"), filepath.Join(dir, "mapper"), filepath.Join(dir, "hostile.so")
	if err := os.WriteFile(src, []byte(mapperSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-rdynamic", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	machine := elf.EM_X86_64
	if runtime.GOARCH == "arm64" {
		machine = elf.EM_AARCH64
	}
	file := hostileELF(hostileSpec{machine: machine, gnuHash: true, nameLen: 1 << 20, nSyms: 10000, nSects: 65000, relaSize: 24 * 10000})
	if err := os.WriteFile(hostile, file, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("hostile file: %d bytes", len(file))
	cmd := exec.Command(exe, hostile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("mapper: %q, %v", line, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(hostile, &st); err != nil {
		t.Fatal(err)
	}

	r := NewResolver("/proc")
	base := memoryInFlight()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	loc, err := r.Resolve(cmd.Process.Pid)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("%v; the resolution allocated %d KiB", loc, grew>>10)
	if loc.Module != exe {
		t.Errorf("variable found in %s, want %s", loc.Module, exe)
	}
	if grew > MaxResolutionMemory {
		t.Errorf("the resolution allocated %d KiB, its ceiling is %d KiB", grew>>10, MaxResolutionMemory>>10)
	}
	if got := memoryInFlight(); got != base {
		t.Errorf("%d bytes still accounted after the resolution returned", got-base)
	}
	parsed := false
	r.mu.Lock()
	for k, ce := range r.cache {
		if k.ino == st.Ino {
			parsed = ce.err == nil && ce.facts != nil && !ce.facts.sym.found
		}
	}
	r.mu.Unlock()
	if !parsed {
		t.Error("the hostile file was not parsed as a module")
	}

	// Given up on before it starts: nothing is read, nothing kept.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewResolver("/proc").ResolveContext(ctx, cmd.Process.Pid); !errors.Is(err, ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("abandoned resolution: %v, want ErrTransient (cancelled)", err)
	}
	if got := memoryInFlight(); got != base {
		t.Errorf("%d bytes still accounted after the abandoned resolution", got-base)
	}
}
