// The integrity check for JPEGs that are not decoded by the crop-region path (crop_decode off, CMYK): the same
// policy as decode_jpeg_region, so a file is accepted or refused whichever path decodes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pinfeed::data {

// Reads every scan of a JPEG up to its end-of-image marker the cheapest way libjpeg allows: at 1/8 DCT scale,
// skipping all rows but the last, so almost all the work is entropy decoding. Throws std::runtime_error when
// libjpeg reports an error or any warning (corrupt data: truncation, bad Huffman codes, extraneous bytes,
// bad SOS parameters...), or when the header declares more than max_pixels (0: no limit), before anything
// is allocated. `buffer` holds one output row; it only grows.
void check_jpeg(const uint8_t* data, size_t size, int64_t max_pixels, std::vector<uint8_t>& buffer);

}  // namespace pinfeed::data
