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

// pcRegister: x86's RIP=… and aarch64's PC=… in QEMU's "info registers".
var pcRegister = regexp.MustCompile(`\b(RIP|PC)=([0-9a-f]{16})`)

// symbolize appends the kernel symbol (from System.map; the guest boots
// with nokaslr) to every program counter in regs.
func symbolize(regs, sysmap string) string {
	syms := readSystemMap(sysmap)
	if len(syms) == 0 {
		return regs
	}
	return pcRegister.ReplaceAllStringFunc(regs, func(m string) string {
		sub := pcRegister.FindStringSubmatch(m)
		pc, err := strconv.ParseUint(sub[2], 16, 64)
		if err != nil {
			return m
		}
		i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > pc }) - 1
		if i < 0 {
			return m
		}
		return fmt.Sprintf("%s <%s+%#x>", m, syms[i].name, pc-syms[i].addr)
	})
}

type symbol struct {
	addr uint64
	name string
}

func readSystemMap(path string) []symbol {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []symbol
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		if a, err := strconv.ParseUint(fs[0], 16, 64); err == nil {
			out = append(out, symbol{a, fs[2]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}
