"""Write a minimal PE32+ DLL whose only content is forwarded exports.

Wine 8.0 (Debian bookworm) has no bcryptprimitives.dll, yet every Rust-built wheel
(pydantic-core, rpds-py, ...) imports bcryptprimitives!ProcessPrng, so the import
fails with "DLL load failed ... Module not found". This writes a code-free DLL that
forwards ProcessPrng to advapi32!SystemFunction036 (RtlGenRandom): same x64 calling
convention (buffer, length); Rust ignores the return value. Only for Wine; real
Windows has the real DLL.

usage: python3 make_forwarder_dll.py OUT.dll [DLLNAME [EXPORT=TARGET ...]]
"""

from __future__ import annotations

import struct
import sys


def build(dll_name: str, forwards: dict[str, str]) -> bytes:
    section_rva, file_align, sect_align = 0x1000, 0x200, 0x1000
    names = sorted(forwards)  # export names must be sorted for binary search
    n = len(names)
    # Export directory (40 bytes) then tables, then strings.
    eat = section_rva + 40
    npt = eat + 4 * n
    ordt = npt + 4 * n
    strings = bytearray()
    strings_rva = ordt + 2 * n

    def add(s: str) -> int:
        rva = strings_rva + len(strings)
        strings.extend(s.encode("ascii") + b"\0")
        return rva

    name_rva = add(dll_name)
    fwd_rvas = [add(forwards[k]) for k in names]
    nm_rvas = [add(k) for k in names]
    body = struct.pack("<IIHHIIIIIII", 0, 0, 0, 0, name_rva, 1, n, n, eat, npt, ordt)
    body += b"".join(struct.pack("<I", r) for r in fwd_rvas)
    body += b"".join(struct.pack("<I", r) for r in nm_rvas)
    body += b"".join(struct.pack("<H", i) for i in range(n))
    body += bytes(strings)
    export_size = len(body)  # forwarders are recognised by pointing inside this range
    raw_size = (len(body) + file_align - 1) // file_align * file_align
    virt_size = len(body)
    image_size = section_rva + (virt_size + sect_align - 1) // sect_align * sect_align

    dos = bytearray(64)
    dos[0:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 64)
    coff = struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, 240, 0x2022)  # EXE|LARGE_ADDR|DLL
    opt = struct.pack(
        "<HBBIIIIIQIIHHHHHHIIIIHHQQQQII",
        0x20B,
        14,
        0,
        0,
        raw_size,
        0,
        0,
        0,  # magic, linker, code/data sizes, entry=0, code base
        0x6FFF0000000,
        sect_align,
        file_align,  # image base (unlikely to collide), alignments
        6,
        0,
        0,
        0,
        6,
        0,
        0,  # OS, image, subsystem versions; win32 version value
        image_size,
        file_align,
        0,
        3,
        0x0100,  # size of image, headers, checksum, CUI, NX
        0x100000,
        0x1000,
        0x100000,
        0x1000,
        0,
        16,  # stack/heap reserve/commit, flags, dirs
    )
    dirs = [(0, 0)] * 16
    dirs[0] = (section_rva, export_size)
    opt += b"".join(struct.pack("<II", *d) for d in dirs)
    section = struct.pack(
        "<8sIIIIIIHHI",
        b".edata",
        virt_size,
        section_rva,
        raw_size,
        file_align,
        0,
        0,
        0,
        0,
        0x40000040,  # initialized data, readable
    )
    headers = bytes(dos) + b"PE\0\0" + coff + opt + section
    headers += bytes(file_align - len(headers))
    return headers + body + bytes(raw_size - len(body))


def main() -> None:
    out = sys.argv[1]
    dll_name = sys.argv[2] if len(sys.argv) > 2 else "bcryptprimitives.dll"
    pairs = sys.argv[3:] or ["ProcessPrng=advapi32.SystemFunction036"]
    forwards = dict(p.split("=", 1) for p in pairs)
    with open(out, "wb") as f:
        f.write(build(dll_name, forwards))


if __name__ == "__main__":
    main()
