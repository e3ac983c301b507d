// SPDX-License-Identifier: Apache-2.0

package nodectx

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
)

// Layout holds the V8 and writer constants of the walk. Writers from
// @datadog/pprof 5.17 to 5.18 publish them in the process context
// (threadlocal.* keys below) and keep the record behind a native wrapper;
// 5.20 publishes none and keeps the record pointer in the object's first
// internal field itself (Direct), at an offset that depends on the V8 of
// the Node release (ForModule).
type Layout struct {
	TaggedSize               uint64
	JSMapTableOffset         uint64
	OrderedHashMapHeaderSize uint64
	// WrappedObjectOffset: the JS object's first embedder (internal) field.
	WrappedObjectOffset uint64
	// Direct: that field holds the record's address; otherwise a native
	// wrapper's, whose field at NativeWrapFieldsOffset holds the record's.
	Direct                 bool
	NativeWrapFieldsOffset uint64
}

// Published layout keys (ProcessContext.attributes, integers).
const (
	KeyTaggedSize               = "threadlocal.tagged_size"
	KeyJSMapTableOffset         = "threadlocal.js_map_table_offset"
	KeyOrderedHashMapHeaderSize = "threadlocal.ordered_hash_map_header_size"
	KeyWrappedObjectOffset      = "threadlocal.wrapped_object_offset"
	KeyNativeWrapFieldsOffset   = "threadlocal.native_wrap_fields_offset"
)

// base: Node 22 to 26 on x86-64 and arm64 (no pointer compression).
var base = Layout{TaggedSize: 8, JSMapTableOffset: 0x18, OrderedHashMapHeaderSize: 0x10, WrappedObjectOffset: 24}

// firstFieldByABI: where V8 puts a JS API object's first internal field, by
// the Node module ABI (process.versions.modules) the addon was built for:
// V8 12.9 (Node 23) added a C++-heap wrapper pointer after the header.
var firstFieldByABI = map[int]uint64{
	127: 24, // Node 22
	131: 32, // Node 23
	137: 32, // Node 24
	141: 32, // Node 25
	147: 32, // Node 26
}

// maxOffset bounds a published offset: they are a few words into an object.
const maxOffset = 4096

// ErrLayout: the layout is not known, or cannot be walked by this reader.
var ErrLayout = fmt.Errorf("unsupported %s layout", Schema)

var abiTag = regexp.MustCompile(`\.abi([0-9]+)\.node$`)

// ForModule is the layout of a writer whose addon is module (the path of
// the module that defines the TLS variable) and which published ints
// (processctx.ThreadLocal.Ints): the published values when there are any,
// else 5.20's layout for the addon's Node ABI, read from its prebuilt
// file name (dd_pprof.node.abi137.node).
func ForModule(ints map[string]int64, module string) (Layout, error) {
	if published(ints) {
		return fromPublished(ints)
	}
	m := abiTag.FindStringSubmatch(filepath.Base(module))
	if m == nil {
		return Layout{}, fmt.Errorf("%w: no layout published and %s names no Node ABI", ErrLayout, filepath.Base(module))
	}
	abi, _ := strconv.Atoi(m[1])
	off, ok := firstFieldByABI[abi]
	if !ok {
		return Layout{}, fmt.Errorf("%w: no layout published and Node ABI %d is not one this reader knows (Node 22 to 26)", ErrLayout, abi)
	}
	l := base
	l.WrappedObjectOffset, l.Direct = off, true
	return l, nil
}

func published(ints map[string]int64) bool {
	for _, k := range []string{KeyTaggedSize, KeyJSMapTableOffset, KeyOrderedHashMapHeaderSize, KeyWrappedObjectOffset, KeyNativeWrapFieldsOffset} {
		if _, ok := ints[k]; ok {
			return true
		}
	}
	return false
}

// fromPublished takes a published layout whole: a missing key would leave
// a default of another layout (the wrapper's word 0 read as the record).
func fromPublished(ints map[string]int64) (Layout, error) {
	l := base
	for key, dst := range map[string]*uint64{
		KeyTaggedSize:               &l.TaggedSize,
		KeyJSMapTableOffset:         &l.JSMapTableOffset,
		KeyOrderedHashMapHeaderSize: &l.OrderedHashMapHeaderSize,
		KeyWrappedObjectOffset:      &l.WrappedObjectOffset,
		KeyNativeWrapFieldsOffset:   &l.NativeWrapFieldsOffset,
	} {
		v, ok := ints[key]
		if !ok {
			return l, fmt.Errorf("%w: published layout lacks %s", ErrLayout, key)
		}
		if v < 0 || v >= maxOffset || v%8 != 0 {
			return l, fmt.Errorf("%w: %s = %d", ErrLayout, key, v)
		}
		*dst = uint64(v)
	}
	if l.TaggedSize != 8 {
		// 4 is pointer compression (cage-relative tagged words): not walked.
		return l, fmt.Errorf("%w: tagged size %d (pointer compression)", ErrLayout, l.TaggedSize)
	}
	return l, nil
}
