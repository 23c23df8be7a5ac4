"""Write the pydantic v2 ``model_json_schema()`` schemas of the coverage set.

    python tests/data/schemas/make_pydantic_schemas.py   # needs pydantic and email-validator

Each model is an ordinary application model (constraints, ``EmailStr``, ``HttpUrl``,
enums, nested models, ``Optional``, lists, ``Literal``, dicts, datetimes, UUIDs,
constrained strings, discriminated unions); its schema is written as
``pydantic_<name>.json`` = ``{"origin": "pydantic", "generator": ..., "schema": ...}``.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, EmailStr, Field, HttpUrl, StringConstraints


class Priority(enum.StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class Colour(int, enum.Enum):
    red = 1
    green = 2
    blue = 3


class Address(BaseModel):
    street: str
    city: str
    postcode: Annotated[str, StringConstraints(pattern=r"^[0-9]{5}$")]
    country: Literal["DE", "FR", "PT", "US"] = "DE"


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=130)
    email: EmailStr
    address: Address | None = None


class Task(BaseModel):
    """A to-do item."""

    title: str
    done: bool = False
    priority: Priority
    tags: list[str] = Field(default_factory=list, max_length=5)
    due: dt.date | None = None


class TodoList(BaseModel):
    owner: Person
    tasks: list[Task] = Field(max_length=4)


class Score(BaseModel):
    model_config = ConfigDict(extra="forbid")
    player: str
    points: int = Field(ge=0, le=100)
    accuracy: float = Field(ge=0.0, le=1.0)


class Website(BaseModel):
    url: HttpUrl
    title: str
    rank: int = Field(gt=0)
    language: Annotated[str, StringConstraints(min_length=2, max_length=2)]


class Event(BaseModel):
    id: uuid.UUID
    name: str
    starts_at: dt.datetime
    ends_at: dt.datetime | None = None
    attendees: list[EmailStr] = Field(default_factory=list, max_length=3)


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int = Field(ge=0)


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float


class Lizard(BaseModel):
    pet_type: Literal["lizard", "reptile"]
    scales: bool


class Owner(BaseModel):
    pet: Cat | Dog | Lizard = Field(discriminator="pet_type")
    name: str


class Invoice(BaseModel):
    number: Annotated[str, StringConstraints(pattern=r"^INV-[0-9]{4}$")]
    amount: Decimal = Field(ge=0, decimal_places=2)
    currency: Literal["EUR", "USD", "GBP"]
    paid: bool
    lines: dict[str, int]


class Product(BaseModel):
    sku: str = Field(description="Stock keeping unit", examples=["AB-123"])
    name: str
    price: float = Field(gt=0, le=10000)
    colour: Colour
    stock: int = Field(default=0, ge=0)
    attributes: dict[str, str] | None = None


class Category(BaseModel):
    name: str
    children: list[Category] = Field(default_factory=list, max_length=3)


class Comment(BaseModel):
    author: str
    text: str = Field(max_length=200)
    replies: list[Comment] | None = None


class SearchQuery(BaseModel):
    query: str
    limit: int = Field(10, ge=1, le=50)
    sort: Literal["relevance", "date"] = "relevance"
    filters: dict[str, list[str]] = Field(default_factory=dict)


class WeatherCall(BaseModel):
    """Get the current weather in a city."""

    city: str
    unit: Literal["celsius", "fahrenheit"]
    days: int | None = Field(None, ge=1, le=7)


class Coordinates(BaseModel):
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)


class Place(BaseModel):
    name: str
    location: Coordinates
    visited: list[dt.date] = Field(default_factory=list, max_length=3)
    rating: Annotated[int, Field(ge=1, le=5)] | None = None


class Paged(BaseModel):
    items: list[Person] = Field(max_length=2)
    next_cursor: str | None
    total: int = Field(ge=0)


class Contact(BaseModel):
    kind: Literal["email", "phone"]
    value: str


class Signup(BaseModel):
    model_config = ConfigDict(extra="forbid", title="SignupForm")
    username: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{2,15}$")]
    email: EmailStr
    password_hint: str | None = Field(None, deprecated=True)
    contacts: list[Contact] = Field(min_length=1, max_length=3)
    newsletter: bool = False


class Move(BaseModel):
    piece: Literal["K", "Q", "R", "B", "N", "P"]
    square: Annotated[str, StringConstraints(pattern=r"^[a-h][1-8]$")]


class Game(BaseModel):
    white: str
    black: str
    moves: tuple[Move, Move, Move]
    result: Literal["1-0", "0-1", "1/2-1/2"] | None = None


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    confidence: float = Field(ge=0, le=1)
    keywords: set[str] = Field(max_length=4)


class Extraction(BaseModel):
    people: list[Person] = Field(max_length=2)
    places: list[Place] = Field(max_length=2)
    sentiment: Sentiment


class Recipe(BaseModel):
    title: str
    servings: int = Field(ge=1, le=12)
    minutes: int = Field(multiple_of=5, ge=5)
    ingredients: list[Annotated[str, StringConstraints(max_length=40)]] = Field(
        min_length=1, max_length=6
    )
    vegetarian: bool


MODELS: dict[str, type[BaseModel]] = {
    "person": Person,
    "task": Task,
    "todo_list": TodoList,
    "score": Score,
    "website": Website,
    "event": Event,
    "discriminated_pet": Owner,
    "invoice": Invoice,
    "product": Product,
    "recursive_category": Category,
    "recursive_comment": Comment,
    "search_query": SearchQuery,
    "weather_call": WeatherCall,
    "place": Place,
    "paged_people": Paged,
    "signup": Signup,
    "chess_game": Game,
    "extraction": Extraction,
    "recipe": Recipe,
}


def main() -> None:
    here = Path(__file__).parent
    for name, model in MODELS.items():
        out = {
            "origin": "pydantic",
            "generator": f"pydantic {pydantic.VERSION} {model.__name__}.model_json_schema()",
            "schema": model.model_json_schema(),
        }
        (here / f"pydantic_{name}.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
