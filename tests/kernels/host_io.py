"""C++ text shared by the host (g++) drivers that test the CUDA headers on the CPU."""

# Fp from/to canonical hex (Montgomery inside), as the drivers' stdin/stdout carry it.
FP_IO = r"""
static fp_t parse_fp(const std::string& hex) {  // canonical hex -> Montgomery
    fp_t r = fp_t::zero();
    int word = 0, bit = 0;
    for (int i = (int)hex.size() - 1; i >= 0; i--) {
        char ch = hex[i];
        uint32_t v = ch <= '9' ? ch - '0' : (ch | 32) - 'a' + 10;
        r.v[word] |= v << bit;
        bit += 4;
        if (bit == 32) bit = 0, word++;
    }
    return r.to_mont();
}
static void print_fp(const fp_t& a) {
    fp_t c = a.from_mont();
    for (int i = 11; i >= 0; i--) printf("%08x", c.v[i]);
}
"""
