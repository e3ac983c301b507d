// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Image assembles one guest's initramfs: guestinit as /init, a busybox
// (sh, true, ...), static test binaries and their packages' directories at
// the same absolute paths as on the host (tests find testdata relative to
// their package), and the plan.
type Image struct {
	Root   string // the repository's root on the host
	GOARCH string
	Work   string // a host directory for the builds
	FS     *Initramfs
	Plan   Plan
}

// RepoRoot is the repository's root (this file is test/vm/image.go).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func NewImage(goarch, work string) *Image {
	return &Image{Root: RepoRoot(), GOARCH: goarch, Work: work, FS: NewInitramfs()}
}

var buildLocks sync.Map // GOARCH -> *sync.Mutex

// goBuild runs go with args in the repository root for the guest: static
// and trimmed, for its architecture (the distribution's configuration:
// the standard library and the module's dependencies come from the build
// cache the image's builds fill; the guest finds the tree through
// testenv.RepoRootEnv).
func (im *Image) goBuild(args ...string) error {
	// One build per architecture at a time: a second boot's build then
	// finds the packages the first compiled in the cache instead of
	// compiling them beside it.
	mu, _ := buildLocks.LoadOrStore(im.GOARCH, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	args = append([]string{args[0], "-trimpath"}, args[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Dir = im.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+im.GOARCH, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("GOARCH=%s go %s: %v\n%s", im.GOARCH, strings.Join(args, " "), err, out)
	}
	return nil
}

// AddInit builds guestinit as /init and adds busybox with the applets the
// tests run.
func (im *Image) AddInit(busybox string) error {
	out := filepath.Join(im.Work, "init")
	if err := im.goBuild("build", "-o", out, "./test/vm/guestinit"); err != nil {
		return err
	}
	im.FS.AddFile("/init", out, 0o755)
	im.FS.AddFile("/bin/busybox", busybox, 0o755)
	for _, a := range []string{"sh", "true", "false", "cat", "ls", "sleep", "mount", "dmesg"} {
		im.FS.AddSymlink("/bin/"+a, "busybox")
	}
	im.FS.AddDir("/root")
	im.FS.AddDirPerm("/tmp", 0o1777)
	return nil
}

// AddLibs copies the dynamic loaders and libraries (guest path: host path)
// that exist on the host.
func (im *Image) AddLibs(libs map[string]string) {
	for guest, host := range libs {
		if real, err := filepath.EvalSymlinks(host); err == nil {
			im.FS.AddFile(guest, real, 0o755)
		}
	}
}

// GuestRun is one test binary run of a guest: name labels its results;
// pkg's tests run with args (after -test.v) and a -test.timeout of timeout
// on an unloaded host (guestinit scales it).
type GuestRun struct {
	Name, Pkg string
	Timeout   time.Duration
	Args      []string
}

// AddTests builds the runs' test binaries in one go test -c (the packages
// compile side by side; no DWARF: the guests print Go stacks, which need
// none) and adds them in order.
func (im *Image) AddTests(runs []GuestRun) error {
	out := filepath.Join(im.Work, "tests") + string(filepath.Separator)
	args := []string{"test", "-c", "-ldflags=-s -w", "-o", out}
	seen := map[string]bool{}
	for _, r := range runs {
		if !seen[r.Pkg] {
			seen[r.Pkg] = true
			args = append(args, "./"+r.Pkg)
		}
	}
	if err := im.goBuild(args...); err != nil {
		return err
	}
	for _, r := range runs {
		// go test -c -o DIR/ names each binary after its package's last element.
		bin := filepath.Join(out, filepath.Base(r.Pkg)+".test")
		guest := "/t/" + r.Name + ".test"
		im.FS.AddFile(guest, bin, 0o755)
		dir := filepath.Join(im.Root, r.Pkg)
		if err := im.AddTree(dir); err != nil {
			return err
		}
		im.Plan.Runs = append(im.Plan.Runs, Run{
			Name: r.Name, Path: guest, Dir: dir,
			Args:    append([]string{"-test.v=test2json"}, r.Args...),
			Timeout: r.Timeout,
		})
	}
	return nil
}

// AddTree copies a host directory (a package's, with its testdata; the
// prebuilt fixtures) to the same path in the guest.
func (im *Image) AddTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			im.FS.AddDir(p)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		im.FS.AddFile(p, p, uint32(fi.Mode().Perm()))
		return nil
	})
}

// Write writes the plan and the archive; it returns the archive's path.
func (im *Image) Write() (string, error) {
	b, err := json.MarshalIndent(im.Plan, "", "  ")
	if err != nil {
		return "", err
	}
	im.FS.AddData("/plan.json", b, 0o644)
	out := filepath.Join(im.Work, "initrd.cpio")
	return out, im.FS.Write(out)
}
