#!/usr/bin/env python3
"""A model, in plain Python, of the fp8 decode's fragment layouts (decode/kernel.cuh, kFp8): one
warp's S = Q K^T and O = P V computed through the same ldmatrix (plain and .trans), byte-permute
and mma.m16n8k16 fragment rules as PTX documents them, from tiles in the loader's swizzled
layout, with the merge's column map at the end, and checked against a direct product. Small
integers stand for the codes, so everything is exact. It checks the index algebra of the kernel
(which dim each register holds), not the kernel: that needs a GPU ([cuda][fp8] tests).

    python3 bench/tools/fp8_fragment_model.py
"""
import random
random.seed(1)
def swz(row, chunk, cols):  # element offset (16-bit units) of swizzle<cols>
    nch = cols // 8
    mask = min(nch, 8) - 1
    return row * cols + ((chunk ^ (row & mask)) << 3)

def run(D, warp=1):
    KEYS = 64; ROWS = 16
    T = D // 2  # 16-bit columns of an fp8 tile
    # codes as values (exact): K[key][dim], V[key][dim], Q[row][dim]
    K = [[random.randint(-7, 7) for _ in range(D)] for _ in range(KEYS)]
    V = [[random.randint(-7, 7) for _ in range(D)] for _ in range(KEYS)]
    Q = [[random.randint(-3, 3) for _ in range(D)] for _ in range(ROWS)]
    # smem: byte arrays of the fp8 tiles in the loader's layout: row r, 16-byte chunk c of bytes
    # at 16-bit offset swz(r, c, T) -> byte offset 2*that.
    def tile_bytes(M):
        b = [None] * (KEYS * D)
        for r in range(KEYS):
            for c in range(T // 8):
                base = 2 * swz(r, c, T)
                for i in range(16):
                    b[base + i] = M[r][16 * c + i]
        return b
    kb, vb = tile_bytes(K), tile_bytes(V)
    # query buffer: 16-bit elements [row][D] swizzle<D>
    qbuf = [None] * (ROWS * D)
    for r in range(ROWS):
        for c in range(D // 8):
            base = swz(r, c, D)
            for i in range(8):
                qbuf[base + i] = Q[r][8 * c + i]
    def ldm(b, lane_addr, trans):  # b: byte tile; lane_addr(lane) -> 16-bit element offset
        # returns regs[lane][i] = list of 4 bytes (little-endian b16 pairs)
        out = [[None]*4 for _ in range(32)]
        for i in range(4):
            rows = [lane_addr(8 * i + j) for j in range(8)]  # row start offsets of matrix i
            def elem(r, c):  # b16 element (2 bytes) at matrix row r, col c
                o = 2 * (rows[r] + c)
                return [b[o], b[o + 1]]
            for lane in range(32):
                g, t4 = lane // 4, lane % 4
                if not trans:
                    out[lane][i] = elem(g, 2 * t4) + elem(g, 2 * t4 + 1)
                else:
                    out[lane][i] = elem(2 * t4, g) + elem(2 * t4 + 1, g)
        return out
    def mma(acc, a, b):  # acc[lane][4]; a[lane] = 4 regs of (lo, hi); b[lane] = 2 regs (lo, hi)
        A = [[None]*16 for _ in range(16)]; B = [[None]*8 for _ in range(16)]
        for lane in range(32):
            g, t4 = lane // 4, lane % 4
            A[g][2*t4], A[g][2*t4+1] = a[lane][0]
            A[g+8][2*t4], A[g+8][2*t4+1] = a[lane][1]
            A[g][2*t4+8], A[g][2*t4+9] = a[lane][2]
            A[g+8][2*t4+8], A[g+8][2*t4+9] = a[lane][3]
            B[2*t4][g], B[2*t4+1][g] = b[lane][0]
            B[2*t4+8][g], B[2*t4+9][g] = b[lane][1]
        for lane in range(32):
            g, t4 = lane // 4, lane % 4
            for e, (r, c) in enumerate([(g, 2*t4), (g, 2*t4+1), (g+8, 2*t4), (g+8, 2*t4+1)]):
                acc[lane][e] += sum(A[r][k] * B[k][c] for k in range(16))
    # ---- S = Q K^T for this warp's keys warp*16 .. +15
    sc = [[[0]*4 for _ in range(32)] for _ in range(2)]
    for k2 in range(D // 32):
        def addr(lane):
            mi = lane >> 3
            row = warp * 16 + (mi & 1) * 8 + (lane & 7)
            return swz(row, 2 * k2 + (mi >> 1), T)
        kr = ldm(kb, addr, False)
        for j in range(2):
            kk = 2 * k2 + j
            a = []
            for lane in range(32):
                g, t4 = lane // 4, lane % 4
                chunk, within = 2 * kk + (t4 >> 1), (4 * t4) & 7
                o0 = swz(g, chunk, D) + within; o1 = swz(g + 8, chunk, D) + within
                r0 = (qbuf[o0], qbuf[o0+1]), (qbuf[o0+2], qbuf[o0+3])
                r1 = (qbuf[o1], qbuf[o1+1]), (qbuf[o1+2], qbuf[o1+3])
                a.append([r0[0], r1[0], r0[1], r1[1]])
            for nt in range(2):
                b = []
                for lane in range(32):
                    r = kr[lane][nt + 2 * j]  # 4 bytes
                    b.append([(r[0], r[1]), (r[2], r[3])])  # cvt(r), cvt(r >> 16)
                mma(sc[nt], a, b)
    # check S
    for lane in range(32):
        g, t4 = lane // 4, lane % 4
        for nt in range(2):
            for e, (row, kc) in enumerate([(g, 2*t4), (g, 2*t4+1), (g+8, 2*t4), (g+8, 2*t4+1)]):
                key = warp * 16 + nt * 8 + kc
                want = sum(Q[row][d] * K[key][d] for d in range(D))
                assert sc[nt][lane][e] == want, ("S", D, lane, nt, e, sc[nt][lane][e], want)
    # ---- O = P V with P = small ints from S mod 5 (any values: the mapping is what matters)
    P = [[random.randint(0, 4) for _ in range(16)] for _ in range(16)]  # [row][key in warp]
    pa = []
    for lane in range(32):
        g, t4 = lane // 4, lane % 4
        pa.append([(P[g][2*t4], P[g][2*t4+1]), (P[g+8][2*t4], P[g+8][2*t4+1]),
                   (P[g][2*t4+8], P[g][2*t4+9]), (P[g+8][2*t4+8], P[g+8][2*t4+9])])
    acc = [[[0]*4 for _ in range(32)] for _ in range(D // 8)]
    for c in range(0, D // 16, 2):
        def addr(lane):
            mi = lane >> 3
            row = warp * 16 + (mi & 1) * 8 + (lane & 7)
            return swz(row, c + (mi >> 1), T)
        vr = ldm(vb, addr, True)
        for j in range(2):
            be, bo = [], []
            for lane in range(32):
                x, y = vr[lane][2*j], vr[lane][2*j+1]
                even = [x[0], x[2], y[0], y[2]]  # __byte_perm(x, y, 0x6420)
                odd = [x[1], x[3], y[1], y[3]]   # 0x7531
                be.append([(even[0], even[1]), (even[2], even[3])])
                bo.append([(odd[0], odd[1]), (odd[2], odd[3])])
            mma(acc[2*(c+j)], pa, be)
            mma(acc[2*(c+j)+1], pa, bo)
    # merge's column map
    O = [[None]*D for _ in range(16)]
    for lane in range(32):
        g, t4 = lane // 4, lane % 4
        for n in range(D // 8):
            col = 8 * (n & ~1) + 4 * t4 + (n & 1)
            for (row, e0, e1) in [(g, 0, 1), (g + 8, 2, 3)]:
                assert O[row][col] is None and O[row][col+2] is None
                O[row][col] = acc[n][lane][e0]; O[row][col + 2] = acc[n][lane][e1]
    for row in range(16):
        for d in range(D):
            want = sum(P[row][k] * V[warp * 16 + k][d] for k in range(16))
            assert O[row][d] == want, ("O", D, row, d, O[row][d], want)
    print("D", D, "warp", warp, "ok")

for D in (64, 128, 256):
    for w in (0, 3):
        run(D, w)
