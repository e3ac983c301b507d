// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSymbolize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kallsyms")
	// As read from the second serial port: CRLF line ends, data symbols mixed in.
	syms := "ffffffff81000000 T _stext\r\n" +
		"ffffffff81001000 t native_safe_halt\r\n" +
		"ffffffff82000000 D some_data\r\n" +
		"ffffffff81002000 T smp_call_function_many_cond\r\n" +
		"ffffffffa0001000 t bpf_prog_6deef7357e7b4530_hammer_entry\t[bpf]\r\n"
	if err := os.WriteFile(path, []byte(syms), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := ReadKallsyms(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 4 {
		t.Fatalf("%d text symbols, want 4", k.Len())
	}
	dump := "RIP=ffffffff81002040 RFL=00000046\r\n" +
		"ffffc90000003f00: 0xffffffff81001010 0xffffffffa0001008\r\n" +
		"ffffc90000003f10: 0xffffffffa1230000 0xffffffffffffffff 0xffffffff82000008\r\n"
	got := k.Symbolize(dump)
	for _, want := range []string{
		"ffffffff81002040 smp_call_function_many_cond+0x40",
		"ffffffff81001010 native_safe_halt+0x10",
		"ffffffffa0001008 bpf_prog_6deef7357e7b4530_hammer_entry [bpf]+0x8",
		"ffffffffa1230000 (module/BPF area, no symbol)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// -1 and data addresses are no code.
	for _, bad := range []string{"ffffffffffffffff", "ffffffff82000008 "} {
		if strings.Contains(got, bad) {
			t.Errorf("%q symbolized:\n%s", bad, got)
		}
	}
}

func TestStackCommands(t *testing.T) {
	regs := "CPU#0\r\nRAX=ffffffffc00037a0 RBX=ff11000004b004e0\r\nRSI=ffa000000006d048 RDI=ffa0000000003cf8 RBP=ffa0000000003d80 RSP=ffa0000000003cc8\r\n" +
		"RIP=ffffffff81c00ba0 RFL=00000046\r\nES =0000\r\n" +
		"CPU#1\r\nRAX=0000000000000000 RSP=ffa00000000d0c00\r\nRIP=ffffffff819f9dba RFL=00000046\r\n"
	got := strings.Join(Machines[0].stackCommands(regs), "; ")
	want := "cpu 0; x/64gx 0xffa0000000003cc8; x/12i 0xffffffff81c00ba0; x/12i 0xffffffffc00037a0; cpu 1; x/64gx 0xffa00000000d0c00; x/12i 0xffffffff819f9dba"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
