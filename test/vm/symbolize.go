// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kallsyms is a guest kernel's text symbols (its /proc/kallsyms, which
// guestinit copies to a second serial port; nokaslr keeps them those of
// every boot of that kernel), sorted by address.
type Kallsyms struct {
	addrs []uint64
	names []string
}

// ReadKallsyms reads /proc/kallsyms lines ("ADDR TYPE NAME [MODULE]"),
// keeping text symbols.
func ReadKallsyms(path string) (*Kallsyms, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type sym struct {
		a    uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || !strings.ContainsAny(fs[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		name := fs[2]
		if len(fs) > 3 {
			name += " " + fs[3]
		}
		syms = append(syms, sym{a, name})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].a < syms[j].a })
	k := &Kallsyms{}
	for _, s := range syms {
		k.addrs = append(k.addrs, s.a)
		k.names = append(k.names, s.name)
	}
	return k, nil
}

// Len is the number of text symbols.
func (k *Kallsyms) Len() int { return len(k.addrs) }

// maxSymbolSize bounds how far past a symbol an address is still taken as
// inside it (kallsyms has no sizes).
const maxSymbolSize = 64 << 10

// Lookup names the text symbol that holds a, as name+0xOFF.
func (k *Kallsyms) Lookup(a uint64) (string, bool) {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > a }) - 1
	if i < 0 || a-k.addrs[i] >= maxSymbolSize {
		return "", false
	}
	return fmt.Sprintf("%s+%#x", k.names[i], a-k.addrs[i]), true
}

var kernelWord = regexp.MustCompile(`\b(?:0x)?(ffffffff[0-9a-f]{8})\b`)

// bpfArea: x86-64's module mapping space, where BPF programs and
// trampolines are JITed (those created after the dump have no symbol).
const bpfArea, bpfAreaEnd = 0xffffffffa0000000, 0xffffffffff000000

// Symbolize lists every distinct kernel address in a monitor dump
// (registers, stack words) with its symbol, in order of first appearance.
func (k *Kallsyms) Symbolize(dump string) string {
	var b strings.Builder
	seen := map[uint64]bool{}
	for _, m := range kernelWord.FindAllStringSubmatch(strings.ToLower(dump), -1) {
		a, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil || seen[a] {
			continue
		}
		seen[a] = true
		if name, ok := k.Lookup(a); ok {
			fmt.Fprintf(&b, "%016x %s\n", a, name)
		} else if a >= bpfArea && a < bpfAreaEnd {
			fmt.Fprintf(&b, "%016x (module/BPF area, no symbol)\n", a)
		}
	}
	return b.String()
}
