import unittest

from textkit.chunks import chunk, flatten


class ChunksTest(unittest.TestCase):
    def test_chunk_even(self):
        self.assertEqual(chunk([1, 2, 3, 4], 2), [[1, 2], [3, 4]])

    def test_chunk_remainder(self):
        self.assertEqual(chunk([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_chunk_bad_size(self):
        with self.assertRaises(ValueError):
            chunk([1], 0)

    def test_flatten(self):
        self.assertEqual(flatten([[1, 2], [3]]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
