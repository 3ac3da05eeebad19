#!/usr/bin/env python3
"""The C ABI's pool bookkeeping from Python, with neither torch nor a GPU (CI runs it): content
keys and dedupe, find hits and misses, pins, LRU and segmented-LRU eviction under the page
budget, tails, write
destinations, stale handles, destroyed handles, and bad values named in the errors; every failed
call leaves the pool's statistics as they were.

    LAZYATTN_LIB=build/test/capi python3 python/tests/test_store_cpu.py
"""
import ctypes
import importlib.util
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The ctypes layer alone (lazyattn/__init__.py imports torch).
_spec = importlib.util.spec_from_file_location(
    "lazyattn_capi", os.path.join(os.path.dirname(HERE), "lazyattn", "_capi.py"))
capi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capi)

PAGE = 16


def key(n):
    return 0x1234, n


class Pool:
    def __init__(self, num_pages=8, layers=2, eviction=None):
        self.h = ctypes.c_void_p()
        if eviction is None:  # the ABI's first constructor: LRU
            capi.call("pool_create", layers, 2, 128, PAGE, capi.DTYPE_BFLOAT16, num_pages, 0,
                      ctypes.byref(self.h))
        else:
            capi.call("pool_create_with_eviction", layers, 2, 128, PAGE, capi.DTYPE_BFLOAT16,
                      num_pages, 0, eviction, ctypes.byref(self.h))

    def stats(self):
        s = capi.PoolStats()
        capi.call("pool_stats_get", self.h, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in capi.PoolStats._fields_}

    def allocate(self, k, length, form=capi.FORM_LOCAL):
        h, ins = ctypes.c_uint64(), ctypes.c_int32()
        capi.call("doc_allocate", self.h, k[0], k[1], form, length, ctypes.byref(h),
                  ctypes.byref(ins))
        return h.value, bool(ins.value)

    def insert(self, k, length, pin=True):
        doc, inserted = self.allocate(k, length)
        if inserted:
            capi.call("doc_commit", self.h, doc)
        if not pin:
            capi.call("doc_unpin", self.h, doc)
        return doc

    def find(self, k, pin=0):
        h, found = ctypes.c_uint64(), ctypes.c_int32()
        capi.call("doc_find", self.h, k[0], k[1], capi.FORM_LOCAL, pin, ctypes.byref(h),
                  ctypes.byref(found))
        return h.value if found.value else None

    def live(self, doc):
        try:
            capi.call("doc_info", self.h, doc, None, None, None, None)
            return True
        except capi.LazyAttnValueError:
            return False

    def destroy(self):
        capi.call("pool_destroy", self.h)


class StoreTest(unittest.TestCase):
    def setUp(self):
        capi.lib()

    def assert_fails(self, pattern, name, *args, pool=None):
        before = pool.stats() if pool else None
        with self.assertRaisesRegex(capi.LazyAttnValueError, pattern):
            capi.call(name, *args)
        if pool:
            self.assertEqual(pool.stats(), before, "a failed %s changed the pool" % name)

    def test_dedupe_find_pins_and_lru(self):
        p = Pool(num_pages=8)
        a = p.insert(key(1), 32)
        self.assertEqual(p.insert(key(1), 32), a)
        self.assertEqual(p.stats()["dedupes"], 1)
        self.assertEqual(p.find(key(1)), a)
        self.assertIsNone(p.find(key(99)))
        self.assertEqual((p.stats()["hits"], p.stats()["misses"]), (1, 1))
        b = p.insert(key(2), 32, pin=False)
        c = p.insert(key(3), 32, pin=False)
        p.find(key(2))  # touch b: c is now the least recently used
        d = p.insert(key(4), 64 - 16)  # 3 pages: evicts c (a is pinned)
        self.assertFalse(p.live(c))
        self.assertTrue(p.live(a) and p.live(b) and p.live(d))
        self.assertEqual(p.stats()["evictions"], 1)
        self.assert_fails("pages", "doc_allocate", p.h, 0, 7, capi.FORM_LOCAL, 1000,
                          ctypes.byref(ctypes.c_uint64()), None, pool=p)
        self.assertTrue(p.live(a) and p.live(b) and p.live(d))
        self.assert_fails("is pinned", "doc_erase", p.h, a, pool=p)
        self.assert_fails("stale document handle", "doc_pin", p.h, c, pool=p)
        p.destroy()

    def test_eviction_policies(self):
        """One sequence under each policy: a document asked for again, then documents used once
        that overflow the pages. LRU evicts the first (the least recently used by then);
        segmented LRU keeps it (protected) and evicts the oldest of the others."""
        for eviction, kept in ((None, False), (capi.EVICTION_LRU, False),
                               (capi.EVICTION_SEGMENTED_LRU, True)):
            p = Pool(num_pages=8, eviction=eviction)
            got = ctypes.c_int32(-1)
            capi.call("pool_eviction", p.h, ctypes.byref(got))
            self.assertEqual(got.value, capi.EVICTION_LRU if eviction is None else eviction)
            hot = p.insert(key(1), 32, pin=False)  # 2 pages
            self.assertEqual(p.find(key(1)), hot)  # asked for again
            once = [p.insert(key(10 + i), 32, pin=False) for i in range(3)]  # all 8 pages used
            self.assertEqual(p.stats()["evictions"], 0)
            extra = p.insert(key(20), 32, pin=False)  # 2 more pages: one document goes
            self.assertEqual(p.stats()["evictions"], 1)
            self.assertEqual(p.live(hot), kept, "eviction %s" % eviction)
            self.assertEqual(p.live(once[0]), not kept, "eviction %s" % eviction)
            self.assertTrue(all(p.live(d) for d in once[1:]) and p.live(extra))
            p.destroy()

    def test_tails_and_destinations(self):
        p = Pool(num_pages=16)
        doc = p.insert(key(1), 20)
        tail = ctypes.c_uint64()
        capi.call("tail_create", p.h, capi.FORM_ABSOLUTE, ctypes.byref(tail))
        first = ctypes.c_int64()
        capi.call("tail_reserve", p.h, tail.value, 5, ctypes.byref(first))
        self.assertEqual(first.value, 0)
        capi.call("tail_reserve", p.h, tail.value, 14, ctypes.byref(first))
        self.assertEqual(first.value, 5)
        n = 2 + 19
        size = ctypes.c_int64()
        capi.call("destinations_bytes", n, 0, ctypes.byref(size))
        self.assertEqual(size.value, 2 * n * 4 + (2 * n * 4) % 8)
        buf = (ctypes.c_byte * size.value)()
        kinds = (ctypes.c_int32 * 2)(capi.SEGMENT_DOCUMENT, capi.SEGMENT_TAIL)
        handles = (ctypes.c_uint64 * 2)(doc, tail.value)
        firsts = (ctypes.c_int64 * 2)(18, 0)
        counts = (ctypes.c_int64 * 2)(2, 19)
        got = ctypes.c_int64()
        capi.call("destinations", p.h, 2, kinds, handles, firsts, counts, 0, buf, size.value,
                  ctypes.byref(got))
        self.assertEqual(got.value, n)
        page = (ctypes.c_int32 * n).from_buffer(buf)
        slot = (ctypes.c_int32 * n).from_buffer(buf, 4 * n)
        self.assertEqual([slot[0], slot[1]], [2, 3])          # tokens 18, 19 of the document
        self.assertEqual([slot[2], slot[2 + 16]], [0, 0])     # tail tokens 0 and 16: new pages
        self.assertNotEqual(page[2], page[2 + 16])
        self.assertNotEqual(page[0], page[2])
        # A range past the reserved tail, and rotation into an absolute tail, are refused.
        counts[1] = 20
        self.assert_fails("expected within \\[0, 19\\)", "destinations", p.h, 2, kinds, handles,
                          firsts, counts, 0, buf, size.value, ctypes.byref(got), pool=p)
        counts[1] = 19
        rot = ctypes.c_int64()
        capi.call("destinations_bytes", n, capi.WRITE_ROTATE, ctypes.byref(rot))
        rbuf = (ctypes.c_byte * rot.value)()
        self.assert_fails("rotates K into local form", "destinations", p.h, 2, kinds, handles,
                          firsts, counts, capi.WRITE_ROTATE, rbuf, rot.value, ctypes.byref(got),
                          pool=p)
        capi.call("tail_release", p.h, tail.value)
        self.assert_fails("stale tail handle", "tail_reserve", p.h, tail.value, 1,
                          ctypes.byref(first), pool=p)
        p.destroy()

    def test_bad_values_and_destroyed_handles(self):
        out = ctypes.c_void_p()
        self.assert_fails("dtype 0, expected 1 \\(float16\\) or 2 \\(bfloat16\\)", "pool_create",
                          1, 2, 128, 16, 0, 8, 0, ctypes.byref(out))
        self.assert_fails("page_size 12", "pool_create", 1, 2, 128, 12, 2, 8, 0,
                          ctypes.byref(out))
        self.assert_fails("head_dim 7", "pool_create", 1, 2, 7, 16, 2, 8, 0, ctypes.byref(out))
        for bad in (-1, 2):
            out = ctypes.c_void_p(1)
            refused = "eviction %d, expected 0 \\(lru\\) or 1 \\(segmented_lru\\)" % bad
            self.assert_fails(refused, "pool_create_with_eviction", 1, 2, 128, 16, 2, 8, 0, bad,
                              ctypes.byref(out))
            self.assertIsNone(out.value, "a failed create left a handle")
        p = Pool()
        self.assert_fails("absolute form is for tails only", "doc_allocate", p.h, 1, 2,
                          capi.FORM_ABSOLUTE, 10, ctypes.byref(ctypes.c_uint64()), None, pool=p)
        self.assert_fails("form 7", "tail_create", p.h, 7, ctypes.byref(ctypes.c_uint64()),
                          pool=p)
        self.assert_fails("length 0", "doc_allocate", p.h, 1, 2, capi.FORM_LOCAL, 0,
                          ctypes.byref(ctypes.c_uint64()), None, pool=p)
        self.assert_fails("flags 8", "destinations_bytes", 4, 8, ctypes.byref(ctypes.c_int64()))
        p.destroy()
        self.assert_fails("not a live handle", "pool_stats_get", p.h,
                          ctypes.byref(capi.PoolStats()))
        self.assert_fails("is NULL", "pool_stats_get", None, ctypes.byref(capi.PoolStats()))
        self.assert_fails("not a live handle", "pool_eviction", p.h,
                          ctypes.byref(ctypes.c_int32()))

    def test_fingerprints(self):
        """Pools given the same calls have equal fingerprints (what tensor-parallel ranks
        compare); a call that changes the bookkeeping changes it; a failed one does not."""
        a, b = Pool(num_pages=8), Pool(num_pages=8)

        def fp(p):
            out = ctypes.c_uint64()
            capi.call("pool_fingerprint", p.h, ctypes.byref(out))
            return out.value

        self.assertEqual(fp(a), fp(b))
        docs = [p.insert(key(1), 32, pin=False) for p in (a, b)]
        for p in (a, b):
            p.find(key(2))
        self.assertEqual(fp(a), fp(b))
        before = fp(a)
        a.find(key(1))
        self.assertNotEqual(fp(a), before)
        b.find(key(1))
        self.assertEqual(fp(a), fp(b))
        before = fp(a)
        self.assert_fails("length 0", "doc_allocate", a.h, 9, 9, capi.FORM_LOCAL, 0,
                          ctypes.byref(ctypes.c_uint64()), None, pool=a)
        self.assertEqual(fp(a), before)
        self.assertTrue(a.live(docs[0]))
        a.destroy()
        b.destroy()
        self.assert_fails("not a live handle", "pool_fingerprint", a.h,
                          ctypes.byref(ctypes.c_uint64()))

    def test_fp8_pools(self):
        floats = ctypes.c_float * 4
        ks, vs = floats(0.5, 0.25, 2.0, 1.0), floats(0.125, 1.0, 4.0, 0.75)
        h = ctypes.c_void_p()
        capi.call("pool_create_fp8", 2, 2, 128, PAGE, 8, 0, 1, ks, vs, ctypes.byref(h))
        got = (ctypes.c_float * 8)()
        capi.call("pool_scales", h, got, 8)
        self.assertEqual(list(got), list(ks) + list(vs))
        ev, nbytes = ctypes.c_int32(), ctypes.c_int64()
        capi.call("pool_eviction", h, ctypes.byref(ev))
        self.assertEqual(ev.value, 1)
        capi.call("pool_bytes", h, ctypes.byref(nbytes))
        self.assertEqual(nbytes.value, 2 * 8 * 2 * PAGE * 128)  # one byte an element
        # The bookkeeping is a pool's like any other.
        doc, ins = ctypes.c_uint64(), ctypes.c_int32()
        capi.call("doc_allocate", h, 1, 2, capi.FORM_LOCAL, 40, ctypes.byref(doc),
                  ctypes.byref(ins))
        self.assertTrue(ins.value)
        capi.call("doc_commit", h, doc.value)
        # The 16-bit launches refuse it by name, before looking at any pointer; so do the fp8
        # ones on a bad input dtype.
        self.assert_fails("float8_e4m3 pools: lazyattn_write_fp8", "write", h, None, 0, None,
                          None, None, None, 1, None, 0, None)
        self.assert_fails("input_dtype 0, expected 1 \\(float16\\) or 2 \\(bfloat16\\)",
                          "write_fp8", h, None, 0, None, None, None, None, 0, None, None, 1, None,
                          0, None)
        self.assert_fails("count 7, expected 2 x num_layers 2 x num_kv_heads 2 = 8",
                          "pool_scales", h, got, 7)
        # The fp8 launches (lazyattn_prefill_fp8 since ABI version 6) check their plan before
        # any pointer: none, or a pool's handle, is refused by name.
        for name in ("prefill_fp8", "decode_fp8"):
            rest = (0, None, None, None, None, None, 4, 0.0, 1, capi.DTYPE_BFLOAT16, None, None,
                    None, None)
            self.assert_fails("lazyattn_%s: lazyattn_plan is NULL" % name, name, None, *rest)
            self.assert_fails("lazyattn_%s: lazyattn_plan 0x[0-9a-f]+ is not a live handle"
                              % name, name, h, *rest)
        capi.call("pool_destroy", h)
        # No scales: all 1.
        capi.call("pool_create_fp8", 1, 2, 64, PAGE, 4, 0, 0, None, None, ctypes.byref(h))
        ones = (ctypes.c_float * 4)()
        capi.call("pool_scales", h, ones, 4)
        self.assertEqual(list(ones), [1.0] * 4)
        capi.call("pool_destroy", h)
        # Bad scales are named; nothing is created.
        for bad, text in ((0.0, "0"), (float("nan"), "nan"), (-1.0, "-1")):
            out = ctypes.c_void_p(1)
            self.assert_fails("v_scale\\[2\\] \\(layer 1, KV head 0\\) is %s, expected a finite "
                              "positive scale" % text, "pool_create_fp8", 2, 2, 128, PAGE, 8, 0,
                              0, ks, floats(1.0, 1.0, bad, 1.0), ctypes.byref(out))
            self.assertIsNone(out.value, "a failed create left a handle")
        # fp8 only through its own constructor; scales only of fp8 pools.
        self.assert_fails("dtype 3, expected 1 \\(float16\\) or 2 \\(bfloat16\\) \\(fp8 pools: "
                          "lazyattn_pool_create_fp8\\)", "pool_create", 1, 2, 128, 16,
                          capi.DTYPE_FLOAT8_E4M3, 8, 0, ctypes.byref(ctypes.c_void_p()))
        p = Pool()
        self.assert_fails("a bfloat16 pool has no scales", "pool_scales", p.h, got, 8, pool=p)
        self.assert_fails("a bfloat16 pool, expected a float8_e4m3 pool", "write_fp8", p.h, None,
                          0, None, None, None, None, 2, None, None, 1, None, 0, None, pool=p)
        p.destroy()

    def test_document_keys(self):
        toks = (ctypes.c_int32 * 3)(1, 2, 3)
        hi, lo, hi2, lo2 = (ctypes.c_uint64() for _ in range(4))
        capi.call("doc_key_from_tokens", toks, 3, ctypes.byref(hi), ctypes.byref(lo))
        capi.call("doc_key_from_tokens", toks, 2, ctypes.byref(hi2), ctypes.byref(lo2))
        self.assertNotEqual((hi.value, lo.value), (hi2.value, lo2.value))
        self.assert_fails("num_tokens -1", "doc_key_from_tokens", toks, -1, ctypes.byref(hi),
                          ctypes.byref(lo))


if __name__ == "__main__":
    unittest.main(verbosity=2)
